#!/bin/bash
# Engines of 2 slots (4 engines, 128 conversations), the new default, weight 0 and round_robin, then the order reversed.
cd /work/main
out=/tmp/sweep/slots2
for order in "cache_aware,cache_aware:wait:s0,round_robin" "round_robin,cache_aware:wait:s0,cache_aware"; do
  tag=$(echo $order | cut -c1-5)
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $order" >> $out/log.txt
  /tmp/kv-main bench --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 2 --kv-capacity-tokens 32768 --policies $order > $out/slots2-$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/slots2-$tag.txt | grep -v "prediction" >> $out/log.txt
done
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/log.txt
