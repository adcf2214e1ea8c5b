#!/usr/bin/env bash
# Does vLLM reuse its prefix cache for a request that asks for the prompt's
# log-probabilities? One real vLLM CPU engine as copies.sh starts it, kvgate
# (the build given) in front of it with a debug log, then a 72-token prompt
# three times through kvgate's Generate: plain, plain, and with
# prompt_logprobs. Prints each answer's cached_tokens and kvgate's
# "cache prediction missed" lines. Usage: promptlogprobs.sh OUT KVGATE_BIN
set -euo pipefail
out=$1 bin=$2
cd "$(dirname "$0")/../../.."
. bench/results/vllm-copies-2026-12-01/engine.sh
serve_one "$out" "$bin" --policy cache_aware --block-size 32
PYTHONPATH=sdk/python/src "$PY" - "$P" >"$out/client.txt" <<'PY'
import sys, grpc
from kvgate.v1 import router_pb2, router_pb2_grpc
stub = router_pb2_grpc.RouterStub(grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}"))
ids = list(range(100, 172))
for i, plp in enumerate([False, False, True]):
    sp = router_pb2.SamplingParams(max_new_tokens=1, prompt_logprobs=plp, temperature=0)
    done = None
    for m in stub.Generate(router_pb2.GenerateRequest(input_ids=ids, sampling_params=sp)):
        if m.HasField("complete"):
            done = m.complete
    print(f"request {i + 1} (72 tokens, prompt_logprobs {plp}): cached_tokens {done.usage.cached_tokens}")
PY
cat "$out/client.txt"
grep "cache prediction missed" "$out/kvgate.log" | sed 's/^.*cause=/cause=/' || echo "no prediction missed"
