#!/bin/bash
# Second round: SMG first, with goodput at 2 s (binary of the goodput commit; kvgate serve as at 2f1b9a7).
export PATH=$HOME/.cache/kvgate/smg-venv/bin:$PATH
cd /work/wt/fixes3
OUT=bench/results/smg-overload-2026-11-29
for s in 3 4 5 6; do
  {
    echo "# second round, SMG first; start $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# kvgate bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --requests 1000 --max-running 8 --speed $s --policies smg:cache_aware,kvgate:cache_aware --peer-throughput 0 --slo-ttft 2s --json $OUT/speed$s-smg-first.json"
  } > $OUT/speed$s-smg-first.txt
  /tmp/fixes3-kvgate2 bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl \
    --requests 1000 --max-running 8 --speed $s --policies smg:cache_aware,kvgate:cache_aware --peer-throughput 0 --slo-ttft 2s \
    --json $OUT/speed$s-smg-first.json >> $OUT/speed$s-smg-first.txt 2> $OUT/speed$s-smg-first.stderr
  echo "# exit $?, end $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/speed$s-smg-first.txt
done
