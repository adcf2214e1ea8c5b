#!/bin/bash
# Step 3: multiturn load CoV, main's build (old) and swing5's (new) alternating, cache_aware only;
# then the conversation trace once per build. Builds:
#   old: cd /work/main && go build -o /tmp/kv-main-s5 ./cmd/kvgate   (b0efa4b)
#   new: cd /work/wt/swing5 && go build -o /tmp/kv-s5-new ./cmd/kvgate
cd /work/wt/swing5
declare -A bin=([old]=/tmp/kv-main-s5 [new]=/tmp/kv-s5-new)
for users in 256 128; do
  rounds=5; [ $users = 128 ] && rounds=3
  for round in $(seq $rounds); do
    for b in old new; do
      echo "## users $users round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload multiturn --users $users --policies cache_aware"
      ${bin[$b]} bench --workload multiturn --users $users --policies cache_aware 2>&1
    done
  done
done
for b in old new; do
  echo "## trace $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware"
  ${bin[$b]} bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 4 --requests 1000 --max-running 8 --slo-ttft 2s --policies cache_aware 2>&1
done
