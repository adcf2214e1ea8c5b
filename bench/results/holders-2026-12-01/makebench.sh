#!/bin/bash
# usage: makebench.sh OUTDIR OLD_BIN NEW_BIN   (from the repository's root)
# make bench's multiturn and trace workloads, cache_aware only, the two builds at the same time.
out=$1; old=$2; new=$3; mkdir -p $out
pair() { tag=$1; shift
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" >> $out/log.txt
  $old bench "$@" --policies cache_aware > $out/$tag-old.txt 2>&1 &
  $new bench "$@" --policies cache_aware > $out/$tag-new.txt 2>&1 &
  wait
  for b in old new; do
    grep -E "^\s+cache_aware|prediction misses" $out/$tag-$b.txt | sed "s/^/$tag $b /" >> $out/log.txt
  done
}
pair multiturn --workload multiturn --users 256
pair trace --workload trace --trace bench/testdata/traces/synthetic_trace.jsonl --speed 3
echo "== $(date -u +%H:%M:%S) done" >> $out/log.txt
