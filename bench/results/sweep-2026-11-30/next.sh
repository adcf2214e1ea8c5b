#!/bin/bash
cd /work/main
while kill -0 21276 2>/dev/null; do sleep 5; done
echo "== conversation done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
echo "== real start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
ROUTERS="kvgate kvgate+off" KVGATE_ARGS_off="--kv-events off" POLICIES="cache_aware cache_aware cache_aware cache_aware round_robin" \
  KVGATE_BIN=/tmp/kv-main scripts/realengine/bench.sh /tmp/sweep/real > /tmp/sweep/real.log 2>&1
echo "== real done rc $? $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
T=bench/testdata/traces
/tmp/kv-main bench --workload trace --trace $T/synthetic_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware,cache_aware:wait:s0 --json /tmp/sweep/out/synthetic.json --plot /tmp/sweep/out/synthetic.svg > /tmp/sweep/out/synthetic.txt 2>&1
echo "== synthetic done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/sweep/out/log.txt
