#!/bin/bash
T=bench/testdata/traces
C=$T/conversation_trace.jsonl; S=$T/synthetic_trace.jsonl
/tmp/bm/run.sh conv46-a-new bindmatch --trace $C --speed 4,6 --policies cache_aware:wait
/tmp/bm/run.sh conv46-a-main main --trace $C --speed 4,6 --policies cache_aware:wait
/tmp/bm/run.sh syn6-a-main main --trace $S --speed 6 --policies cache_aware:wait
/tmp/bm/run.sh syn6-a-new bindmatch --trace $S --speed 6 --policies cache_aware:wait
/tmp/bm/run.sh conv46-b-main main --trace $C --speed 4,6 --policies cache_aware:wait
/tmp/bm/run.sh conv46-b-new bindmatch --trace $C --speed 4,6 --policies cache_aware:wait
R=/work/wt/bindmatch/bench/results/bindmatch-2026-11-29
for b in bindmatch main; do
  echo "=== light $b multiturn128 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/light.txt
  /tmp/kv-$b bench --workload multiturn --users 128 --policies cache_aware:wait 2>&1 | grep -E "^\s+cache_aware" >> $R/light.txt
  echo "=== light $b shared-prefix160 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/light.txt
  /tmp/kv-$b bench --workload shared-prefix --qps 160 --policies cache_aware:wait 2>&1 | grep -E "^\s+cache_aware" >> $R/light.txt
done
echo "=== plan done $(date -u +%T)" >> $R/log.txt
