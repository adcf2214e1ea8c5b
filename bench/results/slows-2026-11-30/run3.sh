#!/bin/bash
# After run2.sh: conversation speed 5, the default (step priced in
# proportion), the step unpriced and the threshold rule, twice each,
# alternating, in one process (main's build).
while pgrep -f /tmp/sq/run2.sh >/dev/null; do sleep 5; done
cd /work/main
out=/tmp/sq; T=bench/testdata/traces
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) repeat-5" | tee -a $out/log.txt
/tmp/kv-main bench --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 8 --speed 5 \
  --policies cache_aware:threshold,cache_aware,cache_aware:wait:s0,cache_aware:threshold,cache_aware,cache_aware:wait:s0 \
  --json $out/repeat-5.json > $out/repeat-5.txt 2>&1
grep -E "^\s+(cache_aware|round_robin|pooled)" $out/repeat-5.txt | sed "s/^/repeat-5 /" | tee -a $out/log.txt
echo "== done3 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt
