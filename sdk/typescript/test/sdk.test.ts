// The SDK against a live kvgate (its embedded simulated engines): what the
// README's TypeScript snippets do, checked.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Admin, FinishReason, Router, type GenerateComplete } from "../src/index.js";
import { startKvgate, type Kvgate } from "./kvgate.js";

let kvgate: Kvgate;
let router: Client<typeof Router>;
let admin: Client<typeof Admin>;

before(async () => {
  kvgate = await startKvgate();
  const transport = createGrpcTransport({ baseUrl: kvgate.baseUrl });
  router = createClient(Router, transport);
  admin = createClient(Admin, transport);
});

after(async () => {
  await kvgate?.stop();
});

const prompt = Array.from({ length: 32 }, (_, i) => i + 1);

test("Generate streams chunks, then a completion with usage", async () => {
  const streamed: number[] = [];
  let complete: GenerateComplete | undefined;
  for await (const res of router.generate({ inputIds: prompt, samplingParams: { maxNewTokens: 8, ignoreEos: true }, stream: true })) {
    assert.equal(complete, undefined, "nothing follows the completion");
    if (res.response.case === "chunk") {
      assert.equal(res.response.value.index, streamed.length, "chunk index is the count of tokens before it");
      streamed.push(...res.response.value.tokenIds);
    } else if (res.response.case === "complete") {
      complete = res.response.value;
    }
  }
  assert.ok(complete, "a completion arrived");
  assert.deepEqual(complete.outputIds, streamed);
  assert.equal(complete.outputIds.length, 8);
  assert.equal(complete.finishReason, FinishReason.LENGTH);
  assert.equal(complete.usage?.promptTokens, prompt.length);
  assert.equal(complete.usage?.completionTokens, 8);
  assert.match(complete.worker, /^grpc:\/\//);

  // The same prompt again: the worker that served it has it cached.
  let again: GenerateComplete | undefined;
  for await (const res of router.generate({ inputIds: prompt, samplingParams: { maxNewTokens: 1 } })) {
    if (res.response.case === "complete") again = res.response.value;
  }
  assert.ok((again?.usage?.cachedTokens ?? 0) > 0, `cached tokens on the repeat: ${again?.usage?.cachedTokens}`);
});

test("Chat takes plain JSON for kwargs, tool parameters and arguments, and streams text", async () => {
  let text = "";
  let complete: GenerateComplete | undefined;
  for await (const res of router.chat({
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", toolCalls: [{ type: "function", function: { name: "get_weather", arguments: fromJson(ValueSchema, { city: "Paris" }) } }] },
      { role: "tool", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }],
    chatTemplateKwargs: { enable_thinking: false },
    samplingParams: { maxNewTokens: 16, ignoreEos: true },
    stream: true,
  })) {
    if (res.response.case === "chunk") text += res.response.value.text;
    if (res.response.case === "complete") complete = res.response.value;
  }
  assert.ok(complete);
  assert.equal(complete.text, text, "the completion's text is the chunks' text");
  assert.ok((complete.usage?.promptTokens ?? 0) > 0);
  assert.equal(complete.usage?.completionTokens, 16);
});

test("Embed returns one unit vector per input, in input order, from one worker", async () => {
  const res = await router.embed({ inputs: [{ text: "What is a KV cache?" }, { inputIds: prompt }] });
  assert.equal(res.embeddings.length, 2);
  const dim = res.embeddings[0].embedding.length;
  assert.ok(dim > 0);
  for (const e of res.embeddings) {
    assert.equal(e.embedding.length, dim);
    const norm = Math.sqrt(e.embedding.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `|v| = ${norm}`);
  }
  assert.equal(res.embeddings[1].promptTokens, prompt.length);
  assert.equal(res.usage?.promptTokens, res.embeddings[0].promptTokens + res.embeddings[1].promptTokens);
  assert.match(res.worker, /^grpc:\/\//);
  await assert.rejects(router.embed({ inputs: [] }), (err: unknown) =>
    err instanceof ConnectError && err.code === Code.InvalidArgument && err.rawMessage.includes("inputs"));
});

test("Admin/Explain says where a request would go", async () => {
  const ex = await admin.explain({ request: { case: "generate", value: { inputIds: prompt } } });
  assert.equal(ex.policy, "cache_aware");
  assert.match(ex.worker, /^grpc:\/\//);
  assert.equal(ex.promptTokens, prompt.length);
  assert.equal(ex.workers.length, 2);
  assert.ok(ex.branch !== "" && ex.reason !== "");
});

test("a client mistake is a ConnectError with code InvalidArgument naming the field", async () => {
  const cases: [string, () => AsyncIterable<unknown>, string][] = [
    ["no prompt", () => router.generate({}), "input_ids"],
    ["arguments that are not JSON", () => router.chat({ messages: [{ role: "assistant",
      toolCalls: [{ function: { name: "f", arguments: fromJson(ValueSchema, "{oops") } }] }] }), "messages[0].tool_calls[0].function.arguments"],
  ];
  for (const [name, call, field] of cases) {
    await assert.rejects(async () => {
      for await (const _ of call()) {
        // drain
      }
    }, (err: unknown) => {
      assert.ok(err instanceof ConnectError, `${name}: ${err}`);
      assert.equal(err.code, Code.InvalidArgument, name);
      assert.ok(err.rawMessage.includes(field), `${name}: ${err.rawMessage} names ${field}`);
      return true;
    });
  }
});
