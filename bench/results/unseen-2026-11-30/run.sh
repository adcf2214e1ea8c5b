#!/bin/bash
# usage: run.sh OUTDIR KVGATE_BIN   (from the repository's root)
set -e
out=$1; bin=$2; mkdir -p $out
python3 bench/results/unseen-2026-11-30/slices.py $out
P=cache_aware,cache_aware:threshold,cache_aware:cost,round_robin,pooled
run() { tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" >> $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  echo "== $(date -u +%H:%M:%S) done $tag rc=$?" >> $out/log.txt
}
run conv6000 --workload trace --trace $out/conv-6000.jsonl --speed 2.5,4.5 --requests 2000 --slo-ttft 2s --max-running 8 --policies $P
run synth2000 --workload trace --trace $out/synth-2000.jsonl --speed 2.5,4.5 --requests 2000 --slo-ttft 2s --max-running 8 --policies $P
run conv16 --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 7,10 --requests 4000 --workers 16 \
  --slo-ttft 2s --max-running 8 --policies $P
