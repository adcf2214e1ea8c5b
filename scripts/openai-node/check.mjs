// Drives kvgate's OpenAI-compatible HTTP front with the official `openai`
// npm package, as a Node application would: streaming chat with a tool
// call and reasoning, structured output (json_schema), embeddings,
// completions from token ids, and the error class the SDK throws for each
// kind of error. Run by `make openai-sdk-test` through the Go test
// TestOpenAINodeSDK, which starts the router and sets
// KVGATE_OPENAI_BASE_URL and KVGATE_OPENAI_API_KEY. Exits non-zero on the
// first check that fails.
import OpenAI from "openai";

const baseURL = process.env.KVGATE_OPENAI_BASE_URL;
const apiKey = process.env.KVGATE_OPENAI_API_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error("FAIL:", what);
    process.exit(1);
  }
  console.log("ok:", what);
}

const models = await client.models.list();
const model = models.data[0].id;

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather forecast",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } },
  },
};

// Streaming chat with a tool call and reasoning.
{
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "What is the weather in Paris?" }],
    tools: [weather],
    stream: true,
    stream_options: { include_usage: true },
  });
  let reasoning = "", name = "", args = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      reasoning += choice.delta.reasoning_content ?? "";
      for (const call of choice.delta.tool_calls ?? []) {
        name += call.function?.name ?? "";
        args += call.function?.arguments ?? "";
      }
      finish = choice.finish_reason ?? finish;
    }
  }
  check(reasoning.trim() === "Call get_weather.", `streamed reasoning_content ${JSON.stringify(reasoning)}`);
  check(name === "get_weather" && JSON.parse(args).city === "Paris", `streamed tool call ${name}(${args})`);
  check(finish === "tool_calls", `finish_reason ${finish}`);
  check(usage && usage.prompt_tokens > 0, `usage chunk ${JSON.stringify(usage)}`);
}

// Structured output.
{
  const out = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Describe a person" }],
    response_format: {
      type: "json_schema",
      json_schema: { name: "person", strict: true, schema: { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false } },
    },
  });
  const person = JSON.parse(out.choices[0].message.content);
  check(typeof person.name === "string" && Number.isInteger(person.age), `json_schema answer ${out.choices[0].message.content}`);
}

// Embeddings: the SDK asks for base64 and decodes it.
{
  const out = await client.embeddings.create({ model, input: ["one", "two"] });
  check(out.data.length === 2 && out.data[0].embedding.length === 8, "embeddings: two vectors of 8");
}

// Completions from token ids.
{
  const out = await client.completions.create({ model, prompt: [1, 2, 3, 4], max_tokens: 3, ignore_eos: true });
  check(out.usage.prompt_tokens === 4 && out.usage.completion_tokens === 3, `completion usage ${JSON.stringify(out.usage)}`);
}

// Errors.
const cases = [
  ["AuthenticationError", OpenAI.AuthenticationError, () => new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0 }).models.list()],
  ["BadRequestError", OpenAI.BadRequestError, () => client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }], n: 2 })],
  ["NotFoundError", OpenAI.NotFoundError, () => client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] })],
  ["APIError 413", OpenAI.APIError, () => client.completions.create({ model, prompt: "a".repeat(70000) })],
];
for (const [name, cls, call] of cases) {
  try {
    await call();
    check(false, `${name} was not thrown`);
  } catch (e) {
    check(e instanceof cls && e.error?.message, `${name}: ${e.status} ${JSON.stringify(e.error?.message)}`);
  }
}
