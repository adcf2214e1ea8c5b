#!/bin/bash
# usage: run2.sh OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
out=$1; old=$2; new=$3; mkdir -p $out
T=bench/testdata/traces
pair() { tag=$1; pol=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" >> $out/log.txt
  $old bench "$@" --policies $pol > $out/$tag-old.txt 2>&1 &
  $new bench "$@" --policies $pol > $out/$tag-new.txt 2>&1 &
  wait
  for b in old new; do
    grep -E "^\s+(cache_aware|vllm_cache_aware)|prediction misses" $out/$tag-$b.txt | sed "s/^/$tag $b /" >> $out/log.txt
  done
}
pair conv256 cache_aware --workload trace --trace $T/conversation_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256
pair synth256 cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256
pair mt128 cache_aware --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000
pair sp30 cache_aware --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000
pair mt128s8 cache_aware --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768
pair mt128v vllm_cache_aware --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --protocol vllm
pair conv256v vllm_cache_aware --workload trace --trace $T/conversation_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256 --protocol vllm
pair synth cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 5 --requests 2000 --slo-ttft 2s --max-running 8
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
