#!/bin/bash
# usage: run.sh OUTDIR  (binaries /tmp/kv-main: main; /tmp/kv-age: the slot wait read from ages)
# Every run uses the wait mode (cache_aware:wait), so the comparison is of its slot estimate alone.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for i in 1 2; do
  for b in main age; do
    run slots8-$b-$i /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies cache_aware:wait,round_robin
  done
done
for b in main age; do
  run syn3-$b /tmp/kv-$b --workload trace --trace $T/synthetic_trace.jsonl --requests 2000 --speed 3 --slo-ttft 2s --policies cache_aware:wait
done
for b in main age; do
  run conv4-$b /tmp/kv-$b --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --speed 4 --max-running 8 --slo-ttft 2s --policies cache_aware:wait
done
for b in main age; do
  run slots2-$b /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 2 --kv-capacity-tokens 32768 --policies cache_aware:wait,round_robin
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
