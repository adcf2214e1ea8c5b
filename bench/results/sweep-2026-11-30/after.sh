#!/bin/bash
cd /work/main
while pgrep -f /tmp/sweep/next.sh >/dev/null; do sleep 5; done
echo "== speed5 repeat start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
/tmp/kv-main bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 5 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware:wait:s0,cache_aware,cache_aware:threshold,cache_aware:cost --json /tmp/sweep/out/conversation-speed5-reversed.json > /tmp/sweep/out/conversation-speed5-reversed.txt 2>&1
echo "== speed5 repeat done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
