#!/bin/bash
# Engines of 256 slots at speed 6: the default against the same with
# --late-binding-engine-queue (an engine with requests in its own queue
# counts as full), alternating processes; main's build at b3f4671.
cd /work/main
out=/tmp/eq; T=bench/testdata/traces
run() { # name trace extra-flags...
  local n=$1 tr=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $n" | tee -a $out/log.txt
  /tmp/kv-main bench --workload trace --trace $T/${tr}_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 256 \
    --speed 6 --policies cache_aware "$@" --json $out/$n.json > $out/$n.txt 2>&1
  grep -E "^\s+cache_aware" $out/$n.txt | sed "s/^/$n /" | tee -a $out/log.txt
  grep -E "prediction misses" $out/$n.txt | sed "s/^/$n /" | tee -a $out/log.txt
}
run conversation-eq-1 conversation --late-binding-engine-queue
run conversation-main-1 conversation
run conversation-eq-2 conversation --late-binding-engine-queue
run conversation-main-2 conversation
run synthetic-eq-1 synthetic --late-binding-engine-queue
run synthetic-main-1 synthetic
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
