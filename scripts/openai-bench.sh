#!/usr/bin/env bash
# openai-bench.sh: kvgate and SMG measured through one client neither wrote:
# inference-perf (PyPI, pinned; make openai-bench installs it) sends the same
# shared-prefix workload to each router's OpenAI-compatible HTTP API, in front
# of fresh simulated engines (an 8B model on one H100), one router after the
# other in one run. Prints one line per router from inference-perf's summary.
#
# Usage: scripts/openai-bench.sh KVGATE_BIN SMG_BIN INFERENCE_PERF_BIN [OUT_DIR]
# Environment: BENCH_ENGINES (4), BENCH_RATE (8 requests/s), BENCH_SECS (30).
set -euo pipefail
kvgate=$1 smg=$2 iperf=$3 out=${4:-$(mktemp -d)}
engines=${BENCH_ENGINES:-4} rate=${BENCH_RATE:-8} secs=${BENCH_SECS:-30}
tok=$(cd "$(dirname "$0")/../workers/sim/tokenizer" && pwd)
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_http() { for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.2; done; echo "$1 never answered" >&2; return 1; }

run() { # run NAME PORT: start engines and the router, drive it, stop them
  local name=$1 port=$2 urls=() i
  for i in $(seq 0 $((engines - 1))); do
    "$kvgate" sim --port $((32100 + i)) --log-level warn >"$out/$name-sim$i.log" 2>&1 &
    pids+=($!)
    urls+=("grpc://127.0.0.1:$((32100 + i))")
  done
  if [ "$name" = kvgate ]; then
    "$kvgate" serve --port 0 --prometheus-port -1 --http-port "$port" --worker-urls "${urls[@]}" \
      --wait-for-workers --log-level warn >"$out/$name.log" 2>&1 &
  else
    "$smg" launch --host 127.0.0.1 --port "$port" --worker-urls "${urls[@]}" --policy cache_aware \
      --tokenizer-path "$tok" --prometheus-port 18599 --log-level warn >"$out/$name.log" 2>&1 &
  fi
  pids+=($!)
  wait_http "http://127.0.0.1:$port/v1/models"
  cat >"$out/$name.yml" <<YML
api: {type: completion, streaming: true}
data:
  type: shared_prefix
  shared_prefix: {num_groups: 8, num_prompts_per_group: 8, system_prompt_len: 512, question_len: 64, output_len: 32, seed: 1}
load:
  type: constant
  stages: [{rate: $rate, duration: $secs}]
  num_workers: 1
server: {type: vllm, model_name: kvgate-sim-8b, base_url: "http://127.0.0.1:$port", ignore_eos: true}
tokenizer: {pretrained_model_name_or_path: $tok}
storage: {local_storage: {path: $out/$name-report}}
YML
  "$iperf" -c "$out/$name.yml" >"$out/$name-inference-perf.log" 2>&1
  cleanup
  pids=()
  python3 - "$name" "$out/$name-report/summary_lifecycle_metrics.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))["successes"]
lat = s["latency"]
ms = lambda k, q: 1000 * lat[k][q]
print(f"{name:7} requests {s['count']['completed'] if isinstance(s['count'], dict) else s['count']}"
      f"  TTFT mean {ms('time_to_first_token', 'mean'):.1f} ms p90 {ms('time_to_first_token', 'p90'):.1f} ms"
      f"  latency mean {ms('request_latency', 'mean'):.1f} ms p90 {ms('request_latency', 'p90'):.1f} ms"
      f"  {s['throughput']['output_tokens_per_sec']:.0f} output tokens/s")
PY
}

run kvgate 18500
run smg 18501
echo "reports in $out"
