#!/bin/bash
cd /work/main
while pgrep -f "/tmp/sweep/(next|after).sh" >/dev/null; do sleep 5; done
echo "== synthetic speed4 repeat start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
/tmp/kv-main bench --workload trace --trace bench/testdata/traces/synthetic_trace.jsonl --speed 4 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware:wait:s0,cache_aware --json /tmp/sweep/out/synthetic-speed4-reversed.json > /tmp/sweep/out/synthetic-speed4-reversed.txt 2>&1
echo "== synthetic speed4 repeat done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
