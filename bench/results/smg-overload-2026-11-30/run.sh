#!/bin/bash
# SMG under overload with kvgate's current default (the wait mode): conversation trace, first
# 1,000 requests, 8 engines of 8 slots. Two rounds: kvgate first, then SMG first.
# Run from the repository's root with the kvgate binary built at the commit named in each file.
export PATH=$HOME/.cache/kvgate/smg-venv/bin:$PATH
BIN=${KVGATE_BIN:-/tmp/kvgate-smgrun}
OUT=bench/results/smg-overload-2026-11-30
for order in kvgate-first smg-first; do
  if [ $order = kvgate-first ]; then P=kvgate:cache_aware,smg:cache_aware; else P=smg:cache_aware,kvgate:cache_aware; fi
  for s in 3 4 5 6; do
    f=$OUT/speed$s-$order
    {
      echo "# build $(git rev-parse --short HEAD), start $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
      echo "# kvgate bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --requests 1000 --max-running 8 --speed $s --policies $P --peer-throughput 0 --slo-ttft 2s --json $f.json"
    } > $f.txt
    $BIN bench --peers smg --workload trace --trace bench/testdata/traces/conversation_trace.jsonl \
      --requests 1000 --max-running 8 --speed $s --policies $P --peer-throughput 0 --slo-ttft 2s \
      --json $f.json >> $f.txt 2> $f.stderr
    echo "# exit $?, end $(date -u +%H:%M:%S) UTC, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >> $f.txt
  done
done
