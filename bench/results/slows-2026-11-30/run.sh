#!/bin/bash
# The slows charge by the square of the step's steepness (new, /tmp/kv-sq)
# against main's in proportion (/tmp/kv-main), each with the step unpriced
# (cache_aware:wait:s0, the same code in both builds) as the anchor.
cd /work/main
out=/tmp/sq; T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench --workload trace --trace $T/conversation_trace.jsonl --requests 2000 --slo-ttft 2s --max-running 8 "$@" \
    --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin|pooled)|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
run new-56 /tmp/kv-sq --speed 5,6 --policies cache_aware,cache_aware:wait:s0,cache_aware:threshold
run main-56 /tmp/kv-main --speed 5,6 --policies cache_aware,cache_aware:wait:s0
run new-34 /tmp/kv-sq --speed 3,4 --policies cache_aware,cache_aware:wait:s0
echo "== done $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a $out/log.txt
