#!/bin/bash
# The slows charge faded with the fleet's pressure (/tmp/kv-pf: main at
# fd9e3fd with slows × (1 − pressure)), beside the step unpriced in the
# same process: conversation speed 5 twice in turn, then speed 3.
cd /work/main
out=/tmp/pfout; T=bench/testdata/traces
for spec in "5 cache_aware,cache_aware:wait:s0,cache_aware,cache_aware:wait:s0" "3 cache_aware,cache_aware:wait:s0"; do
  set -- $spec
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) speed $1" | tee -a $out/log.txt
  /tmp/kv-pf bench --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 8 \
    --speed $1 --policies $2 --json $out/speed$1.json > $out/speed$1.txt 2>&1
  grep -E "^\s+cache_aware" $out/speed$1.txt | sed "s/^/speed$1 /" | tee -a $out/log.txt
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
