"""The SDK against a live kvgate (its embedded simulated engines): what the
README's Python snippets do, checked, including the README's streaming example
run as a user runs it. The package must be installed (the tests import
kvgate.v1 from wherever pip put it, never from src/); from sdk/python:

    pip install . && KVGATE_BIN=../../bin/kvgate python3 -m unittest discover -s tests -v

make sdk-test does that in fresh virtual environments (scripts/install-test.sh).
"""
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest

import grpc
from google.protobuf import json_format

from kvgate.v1 import admin_pb2, admin_pb2_grpc, router_pb2, router_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")
PROMPT = list(range(1, 33))


def start_kvgate():
    """Runs `kvgate serve` on its embedded default on a free loopback port and
    returns the process and the address from its "kvgate serving" log line.
    The binary is $KVGATE_BIN, else the one `make build` writes to bin/kvgate."""
    binary = os.environ.get("KVGATE_BIN", os.path.join(HERE, "..", "..", "..", "bin", "kvgate"))
    proc = subprocess.Popen(
        [binary, "serve", "--port", "0", "--prometheus-port", "-1", "--embedded-time-scale", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    for line in proc.stderr:
        log.append(line)
        m = re.search(r'msg="kvgate serving" grpc=(\S+)', line)
        if m:
            # Keep reading stderr so that kvgate never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    raise RuntimeError(f"kvgate exited ({proc.returncode}) before serving:\n{''.join(log)}")


class SDKTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.address = start_kvgate()
        cls.channel = grpc.insecure_channel(cls.address)
        cls.router = router_pb2_grpc.RouterStub(cls.channel)
        cls.admin = admin_pb2_grpc.AdminStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.proc.terminate()
        cls.proc.wait()
        cls.proc.stderr.close()

    def complete(self, responses):
        """Drains a response stream: the chunks, then the one completion."""
        chunks, complete = [], None
        for res in responses:
            self.assertIsNone(complete, "nothing follows the completion")
            if res.HasField("chunk"):
                chunks.append(res.chunk)
            else:
                complete = res.complete
        self.assertIsNotNone(complete, "a completion arrived")
        return chunks, complete

    def test_generate_streams_chunks_then_usage(self):
        req = router_pb2.GenerateRequest(
            input_ids=PROMPT, sampling_params=router_pb2.SamplingParams(max_new_tokens=8, ignore_eos=True), stream=True)
        chunks, c = self.complete(self.router.Generate(req))
        streamed = []
        for chunk in chunks:
            self.assertEqual(chunk.index, len(streamed), "chunk index is the count of tokens before it")
            streamed.extend(chunk.token_ids)
        self.assertEqual(list(c.output_ids), streamed)
        self.assertEqual(c.finish_reason, router_pb2.FINISH_REASON_LENGTH)
        self.assertEqual((c.usage.prompt_tokens, c.usage.completion_tokens), (len(PROMPT), 8))
        self.assertTrue(c.worker.startswith("grpc://"), c.worker)
        # The same prompt again: the worker that served it has it cached.
        again = router_pb2.GenerateRequest(input_ids=PROMPT, sampling_params=router_pb2.SamplingParams(max_new_tokens=1))
        _, c = self.complete(self.router.Generate(again))
        self.assertGreater(c.usage.cached_tokens, 0)

    def test_chat_takes_plain_json(self):
        req = json_format.ParseDict({
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
            "sampling_params": {"max_new_tokens": 16, "ignore_eos": True},
            "stream": True,
        }, router_pb2.ChatRequest())
        chunks, c = self.complete(self.router.Chat(req))
        self.assertEqual(c.text, "".join(ch.text for ch in chunks), "the completion's text is the chunks' text")
        self.assertGreater(c.usage.prompt_tokens, 0)
        self.assertEqual(c.usage.completion_tokens, 16)
        # The Struct field also takes a dict directly.
        req = router_pb2.ChatRequest(messages=[router_pb2.ChatMessage(role="user", content="hi")])
        req.chat_template_kwargs.update({"enable_thinking": False})
        _, c = self.complete(self.router.Chat(req))
        self.assertGreater(c.usage.prompt_tokens, 0)

    def test_embed(self):
        res = self.router.Embed(router_pb2.EmbedRequest(inputs=[
            router_pb2.EmbedInput(text="What is a KV cache?"), router_pb2.EmbedInput(input_ids=PROMPT)]))
        self.assertEqual(len(res.embeddings), 2)
        dim = len(res.embeddings[0].embedding)
        self.assertGreater(dim, 0)
        for e in res.embeddings:
            self.assertEqual(len(e.embedding), dim)
            self.assertAlmostEqual(sum(x * x for x in e.embedding), 1, places=3)
        self.assertEqual(res.embeddings[1].prompt_tokens, len(PROMPT))
        self.assertEqual(res.usage.prompt_tokens, sum(e.prompt_tokens for e in res.embeddings))
        self.assertTrue(res.worker.startswith("grpc://"), res.worker)
        with self.assertRaises(grpc.RpcError) as cm:
            self.router.Embed(router_pb2.EmbedRequest())
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("inputs", cm.exception.details())

    def test_explain(self):
        ex = self.admin.Explain(admin_pb2.ExplainRequest(generate=router_pb2.GenerateRequest(input_ids=PROMPT)))
        self.assertEqual(ex.policy, "cache_aware")
        self.assertTrue(ex.worker.startswith("grpc://"), ex.worker)
        self.assertEqual(ex.prompt_tokens, len(PROMPT))
        self.assertEqual(len(ex.workers), 2)
        self.assertTrue(ex.branch and ex.reason)

    def test_client_mistakes_are_invalid_argument(self):
        bad_args = json_format.ParseDict({"messages": [{"role": "assistant", "tool_calls": [
            {"function": {"name": "f", "arguments": "{oops"}}]}]}, router_pb2.ChatRequest())
        cases = [
            ("no prompt", lambda: self.router.Generate(router_pb2.GenerateRequest()), "input_ids"),
            ("arguments that are not JSON", lambda: self.router.Chat(bad_args), "messages[0].tool_calls[0].function.arguments"),
        ]
        for name, call, field in cases:
            with self.subTest(name):
                with self.assertRaises(grpc.RpcError) as cm:
                    list(call())
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(field, cm.exception.details())


    def test_readme_example(self):
        """The README's first python block, in its own interpreter, started in
        an empty directory so that only the installed package can be imported."""
        with open(README, encoding="utf-8") as f:
            m = re.search(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)
        self.assertIsNotNone(m, "README.md has a ```python block")
        self.assertIn('"127.0.0.1:30000"', m.group(1), "the example dials kvgate's default address")
        code = m.group(1).replace('"127.0.0.1:30000"', repr(self.address))
        with tempfile.TemporaryDirectory() as empty:
            run = subprocess.run([sys.executable, "-c", code], cwd=empty, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr)
        usage = run.stdout.rstrip("\n").rsplit("\n", 1)[-1]
        m = re.fullmatch(r"(\d+) prompt tokens, (\d+) cached, on (grpc://\S+)", usage)
        self.assertIsNotNone(m, f"the last line is the usage: {run.stdout!r}")
        self.assertGreater(int(m.group(1)), 0)


if __name__ == "__main__":
    unittest.main()
