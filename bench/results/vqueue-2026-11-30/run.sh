#!/bin/bash
# usage: run.sh OUTDIR. /tmp/kv-vobs = vllm_cache_aware recording replies (1eff9b9, now f2e7b7b: the same code);
# /tmp/kv-vq = and the queue rule (b026243, now 0c3d34e: the same code). vllm_cache_aware (its default, wait mode) on simulated
# engines speaking the vLLM protocol, the two builds alternating, each case once in each order.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # build tag args...
  b=$1; tag=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $b $tag" | tee -a $out/log.txt
  /tmp/kv-$b bench --protocol vllm "$@" --json $out/$tag-$b.json > $out/$tag-$b.txt 2>&1
  grep -E "^\s+(vllm_cache_aware|round_robin)|^speed" $out/$tag-$b.txt | sed "s/^/$tag-$b /" | tee -a $out/log.txt
}
case_() { # tag args...
  tag=$1; shift
  for b in $ORDER; do run $b $tag "$@"; done
}
for ORDER in "vobs vq" "vq vobs"; do
  o=${ORDER%% *}
  case_ mt128-$o --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies vllm_cache_aware
  case_ sp30-$o --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies vllm_cache_aware
  case_ slots8-$o --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies vllm_cache_aware
  case_ mt128u-$o --workload multiturn --users 128 --policies vllm_cache_aware
  case_ conv-$o --workload trace --trace $T/conversation_trace.jsonl --speed 4,6 --requests 2000 --slo-ttft 2s --max-running 8 --policies vllm_cache_aware
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
