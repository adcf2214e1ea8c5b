#!/bin/bash
# After the last change (the tie by tree size only while both engines have a running place free),
# built as /tmp/kv-s5-new4 from the commit that follows 0c34b79: the trace once per build, then
# multiturn 256 twice per build, alternating.
cd /work/wt/swing5
declare -A bin=([old]=/tmp/kv-main-s5 [new]=/tmp/kv-s5-new4)
for b in new old; do
  echo "## trace $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware"
  ${bin[$b]} bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware 2>&1
done
for round in 1 2; do
  for b in new old; do
    echo "## users 256 round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload multiturn --users 256 --policies cache_aware"
    ${bin[$b]} bench --workload multiturn --users 256 --policies cache_aware 2>&1
  done
done
