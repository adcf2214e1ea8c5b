#!/bin/bash
# usage: run.sh SET OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
# Each case runs the build before and the change at the same time, and logs
# their exactness and misses by cause. SET: first (first/, the first version
# against acadfe8), merged (merged/), makebench (makebench/: make bench's
# multiturn and trace workloads), untuned (untuned/: parts of the traces
# the change was not looked at on, at a speed it was not run at).
set=$1; out=$2; old=$3; new=$4; mkdir -p $out
T=bench/testdata/traces
. bench/results/pair.sh
conv256() { pair conv256$1 $2 --workload trace --trace $T/conversation_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256 ${3:+--protocol $3}; }
synth256() { pair synth256 cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 6 --requests 2000 --slo-ttft 2s --max-running 256; }
mt128() { pair mt128$1 $2 --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 ${3:+--protocol $3}; }
sp30() { pair sp30 cache_aware --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000; }
mt128s8() { pair mt128s8 cache_aware --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768; }
case $set in
first)
  conv256 "" cache_aware; synth256
  pair conv cache_aware --workload trace --trace $T/conversation_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
  pair synth cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
  mt128s8; mt128 "" cache_aware; sp30
  pair sp160 cache_aware --workload shared-prefix --qps 160 ;;
merged)
  conv256 "" cache_aware; synth256; mt128 "" cache_aware; sp30; mt128s8
  mt128 v vllm_cache_aware vllm; conv256 v vllm_cache_aware vllm
  pair synth cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 5 --requests 2000 --slo-ttft 2s --max-running 8 ;;
makebench)
  pair multiturn cache_aware --workload multiturn --users 256
  pair trace cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 3 ;;
untuned)
  python3 bench/results/unseen-2026-11-30/slices.py $out
  pair conv6000 cache_aware --workload trace --trace $out/conv-6000.jsonl --speed 5 --requests 2000 --slo-ttft 2s --max-running 256
  pair synth2000 cache_aware --workload trace --trace $out/synth-2000.jsonl --speed 5 --requests 2000 --slo-ttft 2s --max-running 256 ;;
*) echo "usage: $0 first|merged|makebench|untuned OUTDIR OLD_BIN NEW_BIN" >&2; exit 2 ;;
esac
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
