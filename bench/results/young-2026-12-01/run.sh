#!/bin/bash
# usage: run.sh SET OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
# Each case runs the build before and the change at the same time and logs
# their exactness and misses by cause. SET: chosen (the runs youngHold was
# chosen on), unchosen (trace parts and speeds it was not chosen on), others
# (workloads whose engines queue at their running limit or little for KV,
# and vllm_cache_aware), again (a second pair of four cases), makebench
# (make bench's multiturn and trace).
set=$1; out=$2; old=$3; new=$4; mkdir -p $out
T=bench/testdata/traces
. bench/results/pair.sh
trace256() { tag=$1; file=$2; speed=$3; shift 3
  pair $tag ${1:-cache_aware} --workload trace --trace $file --speed $speed --requests 2000 --slo-ttft 2s --max-running 256 ${2:+--protocol $2}; }
case $set in
chosen)
  trace256 conv256 $T/conversation_trace.jsonl 6
  trace256 synth256 $T/synthetic_trace.jsonl 6
  pair sp30 cache_aware --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 ;;
unchosen)
  python3 bench/results/young-2026-12-01/slices.py $out
  trace256 synthlast5 $out/synth-2000.jsonl 5
  trace256 conv10000s55 $out/conv-10000.jsonl 5.5
  trace256 conv2000s6 $out/conv-2000.jsonl 6
  trace256 synthfirst5 $T/synthetic_trace.jsonl 5 ;;
others)
  pair mt128 cache_aware --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000
  pair mt128s8 cache_aware --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768
  pair conv8s5 cache_aware --workload trace --trace $T/conversation_trace.jsonl --speed 5 --requests 2000 --slo-ttft 2s --max-running 8
  trace256 conv256v $T/conversation_trace.jsonl 6 vllm_cache_aware vllm ;;
again)
  python3 bench/results/young-2026-12-01/slices.py $out
  trace256 synthlast5 $out/synth-2000.jsonl 5
  trace256 conv256 $T/conversation_trace.jsonl 6
  pair sp30 cache_aware --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000
  pair mt128 cache_aware --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 ;;
makebench)
  pair multiturn cache_aware --workload multiturn --users 256
  pair trace cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 3 ;;
*) echo "usage: $0 chosen|unchosen|others|again|makebench OUTDIR OLD_BIN NEW_BIN" >&2; exit 2 ;;
esac
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
