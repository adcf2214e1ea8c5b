#!/bin/bash
# usage: run.sh OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
out=$1; old=$2; new=$3; mkdir -p $out
T=bench/testdata/traces
pair() { tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" >> $out/log.txt
  $old bench "$@" --policies cache_aware > $out/$tag-old.txt 2>&1 &
  $new bench "$@" --policies cache_aware > $out/$tag-new.txt 2>&1 &
  wait
  for b in old new; do
    grep -E "^\s+cache_aware|prediction misses" $out/$tag-$b.txt | sed "s/^/$tag $b /" >> $out/log.txt
  done
}
pair conv256 --workload trace --trace $T/conversation_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256
pair synth256 --workload trace --trace $T/synthetic_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256
pair conv --workload trace --trace $T/conversation_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
pair synth --workload trace --trace $T/synthetic_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
pair mt128s8 --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768
pair mt128 --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000
pair sp30 --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000
pair sp160 --workload shared-prefix --qps 160
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
