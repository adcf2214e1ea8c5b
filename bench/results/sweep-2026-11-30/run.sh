#!/bin/bash
# usage: run.sh OUTDIR BIN
out=$1; bin=$2; mkdir -p $out
T=bench/testdata/traces
run() { # tag args...
  tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json --plot $out/$tag.svg > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
run conversation --workload trace --trace $T/conversation_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware,cache_aware:wait:s0,round_robin,pooled
run synthetic --workload trace --trace $T/synthetic_trace.jsonl --speed 3,4,5,6 --requests 2000 \
  --slo-ttft 2s --max-running 8 --policies cache_aware,cache_aware:wait:s0,round_robin,pooled
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt
