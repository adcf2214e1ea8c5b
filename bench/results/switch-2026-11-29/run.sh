#!/bin/bash
# usage: run.sh OUTDIR  (binary /tmp/kv-seed: main with the wait mode's start-up rule, 356c128).
# The rows the default switch needs besides the trace sweep (../matrix-2026-11-29): engines of 2, 8
# and 256 slots, MT128, SP30 and make bench's cache_aware rows, the threshold rule and the wait mode
# in one process each run (each policy on fresh engines), alternating which runs first.
out=$1; mkdir -p $out
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
B=/tmp/kv-seed
for order in tw wt; do
  P=cache_aware:threshold,cache_aware:wait; [ $order = wt ] && P=cache_aware:wait,cache_aware:threshold
  run slots8-$order $B --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies $P,round_robin
  run mt128-$order $B --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies $P
  run sp30-$order $B --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies $P
  run mtu-$order $B --workload multiturn --users 64 --qps 2 --policies $P
  run mt256-$order $B --workload multiturn --users 256 --policies $P
  run mt128u-$order $B --workload multiturn --users 128 --policies $P
  run sp160-$order $B --workload shared-prefix --qps 160 --policies $P
  run spu-$order $B --workload shared-prefix --qps 4 --requests 128 --policies $P
done
run slots2 $B --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 2 --kv-capacity-tokens 32768 --policies cache_aware:threshold,cache_aware:wait,round_robin
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
