#!/bin/bash
# Step 3, more alternation of the final build (346f915) against main's (b0efa4b): multiturn 256,
# the conversation trace once more per build, and make bench's shared-prefix workload once per build.
cd /work/wt/swing5
declare -A bin=([old]=/tmp/kv-main-s5 [new]=/tmp/kv-s5-new)
for round in 1 2 3; do
  for b in old new; do
    echo "## users 256 round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload multiturn --users 256 --policies cache_aware"
    ${bin[$b]} bench --workload multiturn --users 256 --policies cache_aware 2>&1
  done
done
for b in new old; do
  echo "## trace $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware"
  ${bin[$b]} bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware 2>&1
done
for b in old new; do
  echo "## shared-prefix $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload shared-prefix --qps 160 --policies cache_aware"
  ${bin[$b]} bench --workload shared-prefix --qps 160 --policies cache_aware 2>&1
done
