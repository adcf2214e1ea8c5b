#!/bin/bash
while kill -0 16673 2>/dev/null; do sleep 5; done
R=/work/wt/bindmatch/bench/results/bindmatch-2026-11-29
cd /work/wt/bindmatch
for b in main bindmatch; do
  echo "=== light $b shared-prefix160 (second pair) $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/light.txt
  /tmp/kv-$b bench --workload shared-prefix --qps 160 --policies cache_aware:wait 2>&1 | grep -E "^\s+cache_aware" >> $R/light.txt
  echo "=== light $b multiturn128 (second pair) $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/light.txt
  /tmp/kv-$b bench --workload multiturn --users 128 --policies cache_aware:wait 2>&1 | grep -E "^\s+cache_aware" >> $R/light.txt
done
echo "=== plan4 done $(date -u +%T)" >> $R/log.txt
