#!/usr/bin/env bash
# aiperf-ci.sh: a CI-sized run of a standard benchmark tool against kvgate's
# OpenAI-compatible HTTP front. AIPerf (PyPI, pinned in
# scripts/aiperf-requirements.txt; it runs on Python 3.11, which inference-perf
# 0.7.0 does not) streams chat completions with synthetic prompts to
# `kvgate serve` on its embedded default (simulated engines in-process,
# answering with random tokens as benchmarks expect, at 10x the speed of an 8B
# model on one H100) and writes its report. The run FAILS when AIPerf
# exits non-zero, reports any failed request, or completes none.
#
# AIPerf 0.13.0 counts a stream that ends with an error event (kvgate's
# `data: {"error": ...}` when an engine fails mid-stream, as OpenAI's servers
# send it) as completed, so kvgate's own count of requests by status code
# (kvgate_requests_total, scraped after the run) must show no error either.
#
# First a self-check: the same run, short, in front of a simulated engine that
# refuses every request (kvgate sim --fail-unavailable) must be judged failed,
# so a check that cannot fail does not pass for one.
#
# Usage: scripts/aiperf-ci.sh KVGATE_BIN AIPERF_BIN [OUT_DIR]
# Environment: AIPERF_REQUESTS (64), AIPERF_CONCURRENCY (4), AIPERF_PORT (18510;
# the self-check's engine takes the next port, kvgate's metrics the one after).
set -euo pipefail
kvgate=$1 aiperf=$2 out=${3:-$(mktemp -d)}
requests=${AIPERF_REQUESTS:-64} concurrency=${AIPERF_CONCURRENCY:-4} port=${AIPERF_PORT:-18510}
tok=$(cd "$(dirname "$0")/../workers/sim/tokenizer" && pwd)
mkdir -p "$out"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT

# bench NAME REQUESTS [WORKER_URL]: kvgate serve (on its embedded default, or
# in front of WORKER_URL), driven by AIPerf; prints AIPerf's figures and
# returns non-zero when the run failed.
bench() {
  local name=$1 n=$2 fleet=(--embedded-reply random --embedded-time-scale 0.1)
  [ -n "${3:-}" ] && fleet=(--worker-urls "$3" --wait-for-workers)
  "$kvgate" serve --port 0 --prometheus-port $((port + 2)) --http-port "$port" "${fleet[@]}" \
    --log-level warn >"$out/$name-kvgate.log" 2>&1 &
  pids+=($!)
  local up=
  for _ in $(seq 1 300); do
    if curl -sf -o /dev/null "http://127.0.0.1:$port/v1/models"; then up=1; break; fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.2
  done
  [ -n "$up" ] || { echo "$name: kvgate serve did not answer:"; cat "$out/$name-kvgate.log"; return 1; }
  local model
  model=$(curl -sf "http://127.0.0.1:$port/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  # The tokenizer is the simulated engines' own, a directory of this
  # repository: AIPerf loads a local path as it is, with nothing fetched from
  # a hub. (Its HF_HUB_OFFLINE mode would look the path up in the hub's cache.)
  local rc=0
  HF_HUB_DISABLE_TELEMETRY=1 "$aiperf" profile --model "$model" --tokenizer "$tok" --url "http://127.0.0.1:$port" \
    --endpoint-type chat --streaming --request-count "$n" --concurrency "$concurrency" \
    --synthetic-input-tokens-mean 256 --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 32 --output-tokens-stddev 0 --random-seed 1 \
    --ui-type none --artifact-dir "$out/$name-aiperf" >"$out/$name-aiperf.log" 2>&1 || rc=$?
  curl -sf "http://127.0.0.1:$((port + 2))/metrics" >"$out/$name-metrics.txt" || true
  cleanup
  [ "$rc" = 0 ] || { echo "$name: aiperf exited $rc:"; tail -n 20 "$out/$name-aiperf.log"; return 1; }
  local report
  report=$(find "$out/$name-aiperf" -name profile_export_aiperf.json | head -n 1)
  [ -n "$report" ] || { echo "$name: aiperf wrote no profile_export_aiperf.json"; return 1; }
  python3 - "$name" "$report" "$out/$name-metrics.txt" <<'PY'
import json, re, sys
name, path, metrics = sys.argv[1:4]
codes = {}
for line in open(metrics):
    m = re.match(r'kvgate_requests_total\{code="(\w+)",method="/kvgate\.v1\.Router/\w+"\} (\S+)', line)
    if m:
        codes[m[1]] = codes.get(m[1], 0) + float(m[2])
r = json.load(open(path))
def avg(key):
    m = r.get(key)
    return (m.get("avg") if isinstance(m, dict) else m) or 0
done = avg("completed_request_count") or avg("request_count")
failed = avg("error_request_count") + sum(e.get("count", 1) for e in r.get("error_summary") or [])
print(f"{name}: aiperf {r.get('aiperf_version')}: {done:.0f} requests completed, {failed:.0f} failed "
      f"({avg('request_error_rate'):.1f}% errors); TTFT avg {avg('time_to_first_token'):.1f} ms, "
      f"latency avg {avg('request_latency'):.1f} ms, {avg('output_token_throughput'):.0f} output tokens/s "
      f"(simulated engines at 10x an 8B model on one H100); kvgate's requests by code: {codes}")
if not codes.get("OK") and not failed:
    sys.exit(f"{name}: kvgate's metrics count no request: the scrape failed or nothing reached the router")
if any(c != "OK" for c in codes):
    sys.exit(f"{name}: kvgate answered some requests with an error: {codes}")
if failed or avg("request_error_rate") or not done or r.get("was_cancelled") or r.get("is_complete") is False:
    sys.exit(f"{name}: aiperf reports failed requests, none completed, or an unfinished run")
PY
}

# The self-check: an engine that fails every stream must fail the run.
"$kvgate" sim --port $((port + 1)) --fail-unavailable --time-scale 0.1 --log-level warn >"$out/faulty-sim.log" 2>&1 &
pids+=($!)
if bench faulty 8 "grpc://127.0.0.1:$((port + 1))" >"$out/faulty.txt" 2>&1; then
  echo "self-check: a run against an engine that fails every stream was judged a success:"; cat "$out/faulty.txt"; exit 1
fi
cleanup
echo "self-check: a run against a failing engine is judged failed: $(head -n 1 "$out/faulty.txt")"

bench kvgate "$requests"
echo "reports in $out"
