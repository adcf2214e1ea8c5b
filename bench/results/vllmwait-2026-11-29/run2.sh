#!/bin/bash
# usage: run2.sh OUTDIR. The oracle rows for vllm_cache_aware's two modes (see run.sh), one order each.
out=$1; mkdir -p $out
run() { # tag args...
  tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  /tmp/kv-new bench --protocol vllm "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(vllm_cache_aware|cache_aware|round_robin|pooled)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
run mt256-A --workload multiturn --users 256 --policies vllm_cache_aware:threshold,vllm_cache_aware:wait,pooled
run sp160-B --workload shared-prefix --qps 160 --policies vllm_cache_aware:wait,vllm_cache_aware:threshold,pooled
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
