"""Streams a Generate and a Chat from kvgate, then asks Admin/Explain where a
request would go. Run kvgate first (`kvgate serve`), then, from sdk/python:

    pip install . && python3 examples/chat.py [127.0.0.1:30000]
"""
import sys

import grpc
from google.protobuf import json_format

from kvgate.v1 import admin_pb2, admin_pb2_grpc, router_pb2, router_pb2_grpc


def main(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        router = router_pb2_grpc.RouterStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)

        # Generate from token ids, streamed: chunks, then one completion with usage.
        req = router_pb2.GenerateRequest(
            input_ids=[1, 2, 3, 4, 5, 6, 7, 8],
            sampling_params=router_pb2.SamplingParams(max_new_tokens=8),
            stream=True,
        )
        for res in router.Generate(req):
            if res.HasField("chunk"):
                print("chunk", list(res.chunk.token_ids))
            else:
                u = res.complete.usage
                print(f"done on {res.complete.worker}: {u.prompt_tokens} prompt, "
                      f"{u.completion_tokens} completion, {u.cached_tokens} cached tokens")

        # Chat: the request as plain JSON, exactly what grpcurl takes; the JSON
        # fields (google.protobuf.Struct and Value) are ordinary dicts here.
        chat = json_format.ParseDict({
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "chat_template_kwargs": {"enable_thinking": False},
            "sampling_params": {"max_new_tokens": 16},
            "stream": True,
        }, router_pb2.ChatRequest())
        text = "".join(res.chunk.text for res in router.Chat(chat) if res.HasField("chunk"))
        print("chat:", repr(text))

        # Where would this request go, and why?
        ex = admin.Explain(admin_pb2.ExplainRequest(generate=router_pb2.GenerateRequest(input_ids=[1, 2, 3, 4, 5, 6, 7, 8])))
        print(f"explain: {ex.worker} by {ex.policy} ({ex.branch}): {ex.reason}")

        # A client mistake is a grpc.RpcError with the status code.
        try:
            for _ in router.Generate(router_pb2.GenerateRequest()):
                pass
        except grpc.RpcError as err:
            print(f"refused: {err.code().name}: {err.details()}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:30000")
