#!/bin/bash
# SMG under overload: conversation trace, first 1,000 requests, 8 engines of 8 slots.
export PATH=$HOME/.cache/kvgate/smg-venv/bin:$PATH
cd /work/wt/fixes3
OUT=bench/results/smg-overload-2026-11-29
for s in 3 4 5 6; do   # speed 6 was run again alone after its first attempt lost its port (speed6-attempt1-port-taken.stderr)
  {
    echo "# binary built at 2f1b9a7, start $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# kvgate bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --requests 1000 --max-running 8 --speed $s --policies cache_aware --peer-throughput 0 --json $OUT/speed$s.json"
  } > $OUT/speed$s.txt
  /tmp/fixes3-kvgate bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl \
    --requests 1000 --max-running 8 --speed $s --policies cache_aware --peer-throughput 0 --json $OUT/speed$s.json \
    >> $OUT/speed$s.txt 2> $OUT/speed$s.stderr
  echo "# exit $?, end $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/speed$s.txt
done
