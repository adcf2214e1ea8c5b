#!/bin/bash
# usage: run.sh OUTDIR  (binaries /tmp/kv-thr: main at de9fa18, the threshold rule the default;
# /tmp/kv-sw: ae19a8c, the wait mode the default). Every run uses each build's default cache_aware.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for i in 1 2; do
  for b in thr sw; do
    run mt128-$b-$i /tmp/kv-$b --workload multiturn --users 128 --policies cache_aware
  done
done
for i in 1 2; do
  for b in thr sw; do
    run slots8-$b-$i /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies cache_aware,round_robin
  done
done
for b in thr sw; do
  run syn3-$b /tmp/kv-$b --workload trace --trace $T/synthetic_trace.jsonl --requests 2000 --speed 3 --slo-ttft 2s --policies cache_aware
done
for b in thr sw; do
  run conv4-$b /tmp/kv-$b --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --speed 4 --max-running 8 --slo-ttft 2s --policies cache_aware
done
for b in thr sw; do
  run slots2-$b /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 2 --kv-capacity-tokens 32768 --policies cache_aware,round_robin
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
