#!/bin/bash
# usage: run.sh OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
# Each case runs the build before (a7e3650) and the change side by side (this folder: 7c6c300; first/: 48116d0), at the same time, cache_aware
# (the wait mode, the default) only: the change alters predictions, not routing, so what is compared
# is prediction exactness and its misses by cause.
out=$1; old=$2; new=$3; mkdir -p $out
python3 bench/results/unseen-2026-11-30/slices.py $out
T=bench/testdata/traces
. bench/results/pair.sh
pair conv cache_aware --workload trace --trace $T/conversation_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
pair synth cache_aware --workload trace --trace $T/synthetic_trace.jsonl --speed 5,6 --requests 2000 --slo-ttft 2s --max-running 8
pair conv6000 cache_aware --workload trace --trace $out/conv-6000.jsonl --speed 4.5 --requests 2000 --slo-ttft 2s --max-running 8
pair synth2000 cache_aware --workload trace --trace $out/synth-2000.jsonl --speed 4.5 --requests 2000 --slo-ttft 2s --max-running 8
pair mt128s8 cache_aware --workload multiturn --users 128 --rounds 8 --workers 4 --max-running 8 --kv-capacity-tokens 32768
pair mt128 cache_aware --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000
pair sp30 cache_aware --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
