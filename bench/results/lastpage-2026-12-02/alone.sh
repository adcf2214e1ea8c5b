#!/bin/bash
# usage: alone.sh OLD_BIN NEW_BIN   (from the repository's root)
# MT128 and MT128 on vLLM engines, one build at a time, alternating, three
# rounds: the pair runs of merged/ run both builds at once, and there these
# two cases moved by more than one build's runs differ.
old=$1 new=$2
for i in 1 2 3; do
  for b in old new; do
    bin=$old; [ $b = new ] && bin=$new
    echo "== round $i $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $bin bench --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware 2>&1 |
      grep -E "^\s+cache_aware|prediction misses" | sed "s/^/mt128 $b /"
    $bin bench --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --protocol vllm --policies vllm_cache_aware 2>&1 |
      grep -E "^\s+vllm_cache_aware|prediction misses" | sed "s/^/mt128v $b /"
  done
done
