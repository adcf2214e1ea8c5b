#!/bin/bash
# usage: run.sh OUTDIR  (binaries /tmp/kv-head: main at d16682e; /tmp/kv-nocap: the same with the wait
# mode counting the whole match, not only what fits beside the KV running requests hold).
# Every run uses cache_aware:wait, alternating.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for b in head nocap; do
  run sp30-$b /tmp/kv-$b --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies cache_aware:wait
done
for b in head nocap; do
  run slots8-$b /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies cache_aware:wait,round_robin
done
for b in head nocap; do
  run syn3-$b /tmp/kv-$b --workload trace --trace $T/synthetic_trace.jsonl --requests 2000 --speed 3 --slo-ttft 2s --policies cache_aware:wait
done
for b in head nocap; do
  run conv4-$b /tmp/kv-$b --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --speed 4 --max-running 8 --slo-ttft 2s --policies cache_aware:wait
done
for b in head nocap; do
  run mt128kv-$b /tmp/kv-$b --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware:wait
done
for b in head nocap; do
  run conv5-$b /tmp/kv-$b --workload trace --trace $T/conversation_trace.jsonl --requests 1500 --speed 5 --slo-ttft 2s --policies cache_aware:wait
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
