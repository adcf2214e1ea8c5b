#!/bin/bash
out=/work/main/bench/results/overload6-2026-11-29/noregress.txt
: > $out
for u in 256 128; do for i in 1 2; do for b in prev final; do
  echo "=== $b multiturn users $u round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out
  /tmp/kv-$b bench --workload multiturn --users $u --policies cache_aware 2>&1 | grep -E "^\s+cache_aware" >> $out
done; done; done
for b in prev final; do
  echo "=== $b shared-prefix qps 160 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out
  /tmp/kv-$b bench --workload shared-prefix --qps 160 --policies round_robin,cache_aware 2>&1 | grep -E "^\s+(cache_aware|round_robin)" >> $out
done
for u in 128 256; do
  echo "=== final multiturn users $u threshold vs wait $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out
  /tmp/kv-final bench --workload multiturn --users $u --policies cache_aware:threshold,cache_aware:wait 2>&1 | grep -E "^\s+cache_aware" >> $out
done
echo "=== done $(date -u +%T)" >> $out
