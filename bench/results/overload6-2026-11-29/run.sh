#!/bin/bash
# Speed 6 (and round_robin at 3-5), first 2,000 requests, 8 engines of 8 slots, the merged build.
K=${K:-/tmp/kv-final}
T=bench/testdata/traces
cd /work/main
run() { # name args...
  name=$1; shift
  echo "=== $name $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> bench/results/overload6-2026-11-29/log.txt
  $K bench --workload trace --requests 2000 --slo-ttft 2s --max-running 8 "$@" \
    --json bench/results/overload6-2026-11-29/$name.json > bench/results/overload6-2026-11-29/$name.txt 2>&1
  echo "=== $name done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> bench/results/overload6-2026-11-29/log.txt
}
run conv-s6-a --trace $T/conversation_trace.jsonl --speed 6 --policies cache_aware:threshold,cache_aware:wait,round_robin
run syn-s6-a --trace $T/synthetic_trace.jsonl --speed 6 --policies cache_aware:threshold,cache_aware:wait,round_robin
run conv-s6-b --trace $T/conversation_trace.jsonl --speed 6 --policies cache_aware:wait,cache_aware:threshold
run syn-s6-b --trace $T/synthetic_trace.jsonl --speed 6 --policies cache_aware:wait,cache_aware:threshold
run conv-rr --trace $T/conversation_trace.jsonl --speed 3,4,5 --policies round_robin
run syn-rr --trace $T/synthetic_trace.jsonl --speed 3,4,5 --policies round_robin
