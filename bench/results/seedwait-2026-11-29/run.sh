#!/bin/bash
# usage: run.sh OUTDIR  (binaries /tmp/kv-main: main at 0e1e139; /tmp/kv-seed: the wait mode with
# the start-up rule). Every run uses the wait mode (cache_aware:wait), so the comparison is of the
# start-up rule alone: make bench's cache_aware rows, MT128, SP30, engines of 8 slots, alternating.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for i in 1 2; do
  for b in main seed; do
    run mtu-$b-$i /tmp/kv-$b --workload multiturn --users 64 --qps 2 --policies cache_aware:wait
    run mt256-$b-$i /tmp/kv-$b --workload multiturn --users 256 --policies cache_aware:wait
    run mt128-$b-$i /tmp/kv-$b --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware:wait
    run sp160-$b-$i /tmp/kv-$b --workload shared-prefix --qps 160 --policies cache_aware:wait
    run spu-$b-$i /tmp/kv-$b --workload shared-prefix --qps 4 --requests 128 --policies cache_aware:wait
    run sp30-$b-$i /tmp/kv-$b --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies cache_aware:wait
  done
done
for b in main seed; do
  run slots8-$b /tmp/kv-$b --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies cache_aware:wait,round_robin
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
