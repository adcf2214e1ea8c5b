# Sourced by copies.sh and promptlogprobs.sh (from the repository's root).
# serve_one OUT KVGATE_BIN KVGATE_FLAGS...: one real vLLM CPU engine as
# scripts/realengine/bench.sh starts them (block size 32, prefix caching,
# KV events), its cache cut to 256 blocks, and kvgate in front of it with a
# debug log (OUT/vllm.log, OUT/kvgate.log), both killed when the script
# exits. Sets PY, and kvgate's gRPC port P and HTTP port H.
CACHE=${KVGATE_CACHE:-$HOME/.cache/kvgate}
PY=$CACHE/vllm-venv/bin/python
pids=()
trap 'for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || true; done' EXIT
serve_one() {
  local out=$1 bin=$2 E Z
  shift 2
  mkdir -p "$out"
  read -r E Z P H < <("$PY" -c 'import socket
s=[socket.socket() for _ in range(4)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*(x.getsockname()[1] for x in s))')
  setsid env VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 VLLM_NO_USAGE_STATS=1 \
    DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$PY" -m vllm.entrypoints.launchers.grpc_server --model "$CACHE/tiny-qwen3" --served-model-name tiny-qwen3 \
    --host 127.0.0.1 --port "$E" --dtype float32 --max-model-len 4096 --block-size 32 --enable-prefix-caching \
    --enforce-eager --max-num-seqs 16 --num-gpu-blocks-override 256 \
    --kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$Z\"}" \
    >"$out/vllm.log" 2>&1 &
  pids+=($!)
  "$PY" scripts/realengine/engine_ctl.py wait-engines 1500 "127.0.0.1:$E"
  setsid "$bin" serve --host 127.0.0.1 --port "$P" --http-port "$H" --worker-urls "grpc://127.0.0.1:$E" \
    --wait-for-workers --log-level debug "$@" >"$out/kvgate.log" 2>&1 &
  pids+=($!)
  "$PY" scripts/realengine/engine_ctl.py wait-serving 120 "127.0.0.1:$P"
}
