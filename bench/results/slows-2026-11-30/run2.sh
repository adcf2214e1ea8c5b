#!/bin/bash
# After run.sh: the synthetic trace at speeds 5 and 6, both builds, each
# with the step unpriced beside it.
while pgrep -f /tmp/sq/run.sh >/dev/null; do sleep 5; done
cd /work/main
out=/tmp/sq; T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench --workload trace --trace $T/synthetic_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 8 "$@" \
    --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
run syn-main-56 /tmp/kv-main --speed 5,6 --policies cache_aware,cache_aware:wait:s0
run syn-new-56 /tmp/kv-sq --speed 5,6 --policies cache_aware,cache_aware:wait:s0
echo "== done2 $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt
