#!/bin/bash
# usage: run.sh OUTDIR. /tmp/kv-main = main 5cad014; /tmp/kv-q = the change, cache_aware in the wait mode
# (the default), alternating main, change, main, change.
# first/: the queue rule applied only when waiting x prompt >= the KV the running requests leave.
# second pass (this folder): as merged; below the running limit the queue waits for KV, as before.
out=$1; mkdir -p $out
T=bench/testdata/traces
run() { # tag bin args...
  tag=$1; bin=$2; shift 2
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $tag" | tee -a $out/log.txt
  $bin bench "$@" > $out/$tag.txt 2>&1
  grep -E "^\s+(cache_aware)|prediction misses|^speed" $out/$tag.txt | sed "s/^/$tag /" | tee -a $out/log.txt
}
for i in 1 2; do
  for b in main q; do
    run conv-$b-$i /tmp/kv-$b --workload trace --trace $T/conversation_trace.jsonl --speed 4,6 --requests 2000 \
      --slo-ttft 2s --max-running 8 --policies cache_aware
    run mt128-$b-$i /tmp/kv-$b --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware
    run sp30-$b-$i /tmp/kv-$b --workload shared-prefix --qps 40 --workers 4 --kv-capacity-tokens 30000 --policies cache_aware
  done
done
echo "== done $(date -u +%H:%M:%S)" | tee -a $out/log.txt
