#!/bin/bash
# No-regression check: make bench's shared-prefix and multiturn workloads, old and new alternating.
cd /work/main
for round in 1 2; do
  for b in old new; do
    for w in "--workload shared-prefix --qps 160" "--workload multiturn --users 256"; do
      echo "## $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build $b: kvgate bench $w --policies cache_aware,round_robin"
      /tmp/kv-$b bench $w --policies cache_aware,round_robin 2>&1
    done
  done
done
