#!/bin/bash
# usage: run.sh OUTDIR. /tmp/kv-main = main 88927cc; /tmp/kv-vobs = vllm_cache_aware recording replies
# (1eff9b9, which became f2e7b7b when a comment was reworded: the same code).
# vllm_cache_aware (its default, wait mode) on simulated engines speaking the vLLM protocol, the two
# builds alternating, each case once in each order.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # build tag args...
  b=$1; tag=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $b $tag" | tee -a $out/log.txt
  /tmp/kv-$b bench --protocol vllm "$@" --json $out/$tag-$b.json > $out/$tag-$b.txt 2>&1
  grep -E "^\s+(vllm_cache_aware|round_robin)" $out/$tag-$b.txt | sed "s/^/$tag-$b /" | tee -a $out/log.txt
}
case_() { # tag args...
  tag=$1; shift
  for b in $ORDER; do run $b $tag "$@"; done
}
for ORDER in "main vobs" "vobs main"; do
  o=${ORDER%% *}
  case_ mtu-$o --workload multiturn --users 64 --qps 2 --policies vllm_cache_aware
  case_ mt128-$o --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies vllm_cache_aware
  case_ sp30-$o --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies vllm_cache_aware
  case_ mt128u-$o --workload multiturn --users 128 --policies vllm_cache_aware
  case_ mt256-$o --workload multiturn --users 256 --policies vllm_cache_aware
  case_ conv-$o --workload trace --trace $T/conversation_trace.jsonl --speed 4 --requests 2000 --slo-ttft 2s --max-running 8 --policies vllm_cache_aware
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
