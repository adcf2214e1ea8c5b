#!/bin/bash
while kill -0 $(cat /tmp/bm/plan.pid) 2>/dev/null; do sleep 5; done
T=bench/testdata/traces
C=$T/conversation_trace.jsonl
/tmp/bm/run.sh conv4-c-new bindmatch --trace $C --speed 4 --policies cache_aware:wait
/tmp/bm/run.sh conv4-c-main main --trace $C --speed 4 --policies cache_aware:wait
/tmp/bm/run.sh thr6-main main --trace $C --speed 6 --policies cache_aware:threshold
/tmp/bm/run.sh thr6-new bindmatch --trace $C --speed 6 --policies cache_aware:threshold
echo "=== plan3 done $(date -u +%T)" >> /work/wt/bindmatch/bench/results/bindmatch-2026-11-29/log.txt
