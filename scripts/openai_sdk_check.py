"""Drives kvgate's OpenAI-compatible HTTP front with the official `openai`
Python package, as an application would: streaming chat with a tool call
and reasoning, structured output through the parse helper with a Pydantic
model, embeddings, completions from token ids, and the exception class the
SDK raises for each kind of error.

Run by `make openai-sdk-test` (through the Go test TestOpenAIPythonSDK,
which starts the router in front of scripted simulated engines and sets
KVGATE_OPENAI_BASE_URL and KVGATE_OPENAI_API_KEY). Exits non-zero on the
first check that fails.
"""

import os
import sys

import openai
from pydantic import BaseModel

BASE = os.environ["KVGATE_OPENAI_BASE_URL"]
KEY = os.environ["KVGATE_OPENAI_API_KEY"]
client = openai.OpenAI(base_url=BASE, api_key=KEY, max_retries=0)
MODEL = client.models.list().data[0].id

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        },
    },
}


def check(cond, what):
    if not cond:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("ok:", what)


def streamed_tool_call():
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, name, args, finish, usage = "", "", "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                name += call.function.name or ""
                args += call.function.arguments or ""
            finish = choice.finish_reason or finish
    check(reasoning.strip() == "Call get_weather.", f"streamed reasoning_content {reasoning!r}")
    check(name == "get_weather" and '"Paris"' in args, f"streamed tool call {name}({args})")
    check(finish == "tool_calls", f"finish_reason {finish}")
    check(usage is not None and usage.prompt_tokens > 0, f"usage chunk {usage}")


class Person(BaseModel):
    name: str
    age: int


def structured_output():
    done = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a person"}],
        response_format=Person,
    )
    person = done.choices[0].message.parsed
    check(isinstance(person, Person), f"parse helper gave {person!r}")


def embeddings():
    out = client.embeddings.create(model=MODEL, input=["one", "two"])
    check(len(out.data) == 2 and len(out.data[0].embedding) == 8, "embeddings: two vectors of 8")
    floats = client.embeddings.create(model=MODEL, input=["one", "two"], encoding_format="float")
    # base64 carries the float32s exactly; JSON numbers their shortest decimal form.
    same = all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(floats.data[1].embedding, out.data[1].embedding))
    check(same, "base64 (the SDK's default) and float vectors agree")


def completions_from_token_ids():
    out = client.completions.create(model=MODEL, prompt=[1, 2, 3, 4], max_tokens=3, extra_body={"ignore_eos": True})
    check(out.usage.prompt_tokens == 4 and out.usage.completion_tokens == 3, f"completion usage {out.usage}")


def errors():
    cases = [
        ("AuthenticationError", openai.AuthenticationError,
         lambda: openai.OpenAI(base_url=BASE, api_key="sk-wrong", max_retries=0).models.list()),
        ("BadRequestError", openai.BadRequestError,
         lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=2)),
        ("NotFoundError", openai.NotFoundError,
         lambda: client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])),
        ("APIStatusError 413", openai.APIStatusError,
         lambda: client.completions.create(model=MODEL, prompt="a" * 70000)),
    ]
    for name, cls, call in cases:
        try:
            call()
        except cls as e:
            check(isinstance(e.body, dict) and e.body.get("message"), f"{name}: {e.status_code} {e.body.get('message')!r}")
            continue
        check(False, f"{name} was not raised")


streamed_tool_call()
structured_output()
embeddings()
completions_from_token_ids()
errors()
