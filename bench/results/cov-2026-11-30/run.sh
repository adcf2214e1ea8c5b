#!/bin/bash
# The runs of this folder, as they ran (30 November 2026, 03:40-03:52 UTC, kvgate at 8c13e00 built as
# /tmp/kv-now, nothing else running). usage: run.sh OUTDIR
out=$1; mkdir -p $out; cd $out
kv=/tmp/kv-now
# 128 conversations on 8 engines (the default fleet), six seeds, both policies, then vllm_cache_aware
# on engines speaking the vLLM protocol, eight seeds.
for i in 1 2 3 4 5 6; do for p in cache_aware vllm_cache_aware; do
  $kv bench --workload multiturn --users 128 --policies $p --seed $i --requests-out $p-$i.jsonl > $p-$i.txt 2>&1
done; done
for i in 1 2 3 4 5 6 7 8; do p=vllm_cache_aware
  $kv bench --protocol vllm --workload multiturn --users 128 --policies $p --seed $i --requests-out v-$p-$i.jsonl > v-$p-$i.txt 2>&1
done
# MT128: 128 conversations on 4 engines of 40,000-token caches (eviction pressure), seeds 1-4, then
# seed 1 eleven more times (m1a-m1k).
for i in 1 2 3 4; do for p in cache_aware vllm_cache_aware; do
  $kv bench --protocol vllm --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies $p --seed $i > m-$p-$i.txt 2>&1
done; done
for r in a b c d e f g h i j k; do p=vllm_cache_aware
  $kv bench --protocol vllm --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies $p --seed 1 --requests-out m1$r.jsonl > m1$r.txt 2>&1
done
# The figures: exactness and load CoV from each table, e.g.
#   for f in *.txt; do echo "$f $(grep -E '^\s+(cache_aware|vllm_cache_aware) ' $f | awk '{print $(NF-3), $(NF-2)}')"; done
