#!/bin/bash
# usage: run.sh OUTDIR  (binary /tmp/kv-seed: main with the wait mode's start-up rule). The sweep of
# BENCHMARKS "At the 2,000 requests", same commands, the cost mode added on the synthetic
# trace: both traces' first 2,000 requests at --speed 3 to 6, every cache_aware mode and the pooled
# engine in one process (each policy on fresh engines, one after the other).
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json --plot $out/$tag.svg > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
run conversation /tmp/kv-seed --workload trace --trace $T/conversation_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware:threshold,cache_aware:cost,cache_aware:wait,pooled
run synthetic /tmp/kv-seed --workload trace --trace $T/synthetic_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware:threshold,cache_aware:cost,cache_aware:wait,pooled
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
