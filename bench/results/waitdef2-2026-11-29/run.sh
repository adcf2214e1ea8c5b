#!/bin/bash
# usage: run.sh OUTDIR  (binaries /tmp/kv-thr: de9fa18, the threshold rule the default;
# /tmp/kv-w2: the wait mode the default with the smaller-tree tie-break and the KV-room condition
# on the queue rule). make bench's cache_aware rows, each build's default cache_aware, alternating.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" --json $out/$tag.json > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware|round_robin)" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for i in 1 2; do
  for b in thr w2; do
    run mtu-$b-$i /tmp/kv-$b --workload multiturn --users 64 --qps 2 --policies cache_aware
    run mt256-$b-$i /tmp/kv-$b --workload multiturn --users 256 --policies cache_aware
    run sp160-$b-$i /tmp/kv-$b --workload shared-prefix --qps 160 --policies cache_aware
    run spu-$b-$i /tmp/kv-$b --workload shared-prefix --qps 4 --requests 128 --policies cache_aware
  done
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
