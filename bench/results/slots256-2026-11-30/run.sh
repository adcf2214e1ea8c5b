#!/bin/bash
# Engines of 256 slots (--max-running 256): the default (cache_aware, wait
# mode, step priced) against round_robin, both traces, speeds 4 and 6, one
# process per trace and speed; main's build.
cd /work/main
out=/tmp/s256; T=bench/testdata/traces
for tr in conversation synthetic; do
  for sp in 4 6; do
    n=$tr-$sp
    echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $n" | tee -a $out/log.txt
    /tmp/kv-main bench --workload trace --trace $T/${tr}_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 256 \
      --speed $sp --policies cache_aware,round_robin --json $out/$n.json > $out/$n.txt 2>&1
    grep -E "^\s+(cache_aware|round_robin|pooled)" $out/$n.txt | sed "s/^/$n /" | tee -a $out/log.txt
  done
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
