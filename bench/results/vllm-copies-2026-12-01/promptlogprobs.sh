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
CACHE=${KVGATE_CACHE:-$HOME/.cache/kvgate}
PY=$CACHE/vllm-venv/bin/python
mkdir -p "$out"
read -r E Z P < <("$PY" -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*(x.getsockname()[1] for x in s))')
pids=()
trap 'for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || true; done' EXIT
setsid env VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 VLLM_NO_USAGE_STATS=1 \
  DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$PY" -m vllm.entrypoints.launchers.grpc_server --model "$CACHE/tiny-qwen3" --served-model-name tiny-qwen3 \
  --host 127.0.0.1 --port "$E" --dtype float32 --max-model-len 4096 --block-size 32 --enable-prefix-caching \
  --enforce-eager --max-num-seqs 16 --num-gpu-blocks-override 256 \
  --kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$Z\"}" \
  >"$out/vllm.log" 2>&1 &
pids+=($!)
"$PY" scripts/realengine/engine_ctl.py wait-engines 1500 "127.0.0.1:$E"
setsid "$bin" serve --host 127.0.0.1 --port "$P" --worker-urls "grpc://127.0.0.1:$E" \
  --policy cache_aware --block-size 32 --wait-for-workers --log-level debug >"$out/kvgate.log" 2>&1 &
pids+=($!)
"$PY" scripts/realengine/engine_ctl.py wait-serving 120 "127.0.0.1:$P"
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
