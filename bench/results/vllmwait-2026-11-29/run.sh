#!/bin/bash
# usage: run.sh OUTDIR. /tmp/kv-new = main with the queue rule for engines at their running limit.
# vllm_cache_aware's two modes, threshold (its default) and wait, on simulated engines speaking the
# vLLM protocol, each case once in each order (each policy runs on fresh engines, one after the other).
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag args...
  tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  /tmp/kv-new bench --protocol vllm "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(vllm_cache_aware|cache_aware|round_robin|pooled)|prediction misses|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
A=vllm_cache_aware:threshold,vllm_cache_aware:wait
B=vllm_cache_aware:wait,vllm_cache_aware:threshold
for o in A B; do
  P=${!o}
  run conv-$o --workload trace --trace $T/conversation_trace.jsonl --speed 4,6 --requests 2000 --slo-ttft 2s --max-running 8 --policies $P
  run mt128-$o --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies $P
  run sp30-$o --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies $P
  run mt128u-$o --workload multiturn --users 128 --policies $P,round_robin
  run slots8-$o --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768 --policies $P,round_robin
  run mtu-$o --workload multiturn --users 64 --qps 2 --policies $P
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
# Then run2.sh: multiturn 256 and shared-prefix 160/s with the pooled engine, for the hit rate.
