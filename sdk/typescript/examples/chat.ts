// Streams a Generate and a Chat from kvgate, then asks Admin/Explain where a
// request would go. Run kvgate first (`kvgate serve`), then:
//
//	npm ci && npx tsc -p tsconfig.json && node dist/examples/chat.js [http://127.0.0.1:30000]
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Admin, Router } from "../src/index.js";

const transport = createGrpcTransport({ baseUrl: process.argv[2] ?? "http://127.0.0.1:30000" });
const router = createClient(Router, transport);
const admin = createClient(Admin, transport);

// Generate from token ids, streamed: chunks, then one completion with usage.
for await (const res of router.generate({
  inputIds: [1, 2, 3, 4, 5, 6, 7, 8],
  samplingParams: { maxNewTokens: 8 },
  stream: true,
})) {
  if (res.response.case === "chunk") {
    console.log("chunk", res.response.value.tokenIds);
  } else if (res.response.case === "complete") {
    const { usage, worker } = res.response.value;
    console.log(`done on ${worker}: ${usage?.promptTokens} prompt, ${usage?.completionTokens} completion, ${usage?.cachedTokens} cached tokens`);
  }
}

// Chat: JSON fields are plain objects (a Struct is a JsonObject); a tool
// call's arguments are a google.protobuf.Value, made from JSON with fromJson.
let text = "";
for await (const res of router.chat({
  messages: [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", toolCalls: [{ type: "function", function: { name: "get_weather", arguments: fromJson(ValueSchema, { city: "Paris" }) } }] },
    { role: "tool", content: "sunny" },
  ],
  tools: [{
    type: "function",
    function: {
      name: "get_weather",
      description: "Weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
  }],
  chatTemplateKwargs: { enable_thinking: false },
  samplingParams: { maxNewTokens: 16 },
  stream: true,
})) {
  if (res.response.case === "chunk") {
    text += res.response.value.text;
  }
}
console.log("chat:", JSON.stringify(text));

// Where would this request go, and why?
const ex = await admin.explain({ request: { case: "generate", value: { inputIds: [1, 2, 3, 4, 5, 6, 7, 8] } } });
console.log(`explain: ${ex.worker} by ${ex.policy} (${ex.branch}): ${ex.reason}`);

// A client mistake is a ConnectError with the gRPC code.
try {
  for await (const _ of router.generate({})) {
    // never reached
  }
} catch (err) {
  const e = ConnectError.from(err);
  console.log(`refused: ${Code[e.code]}: ${e.rawMessage}`);
}
