#!/bin/bash
# usage: run-synthetic.sh OUTDIR  (binary /tmp/kv-seed). The synthetic trace's sweep, the threshold
# rule and the wait mode only, for time (run.sh's synthetic line, which was not run: the cost mode and
# the pooled engine are in BENCHMARKS "At the 2,000 requests").
out=$1; mkdir -p $out
T=bench/testdata/traces
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) synthetic" | tee -a $out/log.txt
/tmp/kv-seed bench --workload trace --trace $T/synthetic_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware:threshold,cache_aware:wait \
  --json $out/synthetic.json --plot $out/synthetic.svg > $out/synthetic.txt 2>&1
grep -E "^\s+(cache_aware|round_robin|pooled)|^speed" $out/synthetic.txt | sed "s/^/synthetic /" | tee -a $out/log.txt
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
