#!/bin/bash
# Pressure-faded slows charge (/tmp/kv-pf: main at b3f4671 with slows ×
# (1 − pressure)) against main's build (/tmp/kv-main), alternating builds,
# each trace at speeds 5 and 6; the pf build also runs the threshold rule
# in the same process.
cd /work/main
out=/tmp/pf2; T=bench/testdata/traces
run() { # name bin trace speed policies
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $1" | tee -a $out/log.txt
  $2 bench --workload trace --trace $T/$3_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 8 \
    --speed $4 --policies $5 --json $out/$1.json > $out/$1.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)" $out/$1.txt | sed "s/^/$1 /" | tee -a $out/log.txt
}
for tr in conversation synthetic; do
  for sp in 5 6; do
    run $tr-$sp-main /tmp/kv-main $tr $sp cache_aware
    run $tr-$sp-pf /tmp/kv-pf $tr $sp cache_aware,cache_aware:threshold
  done
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
