#!/bin/bash
# Step 1: reproduce the multiturn 256 load-CoV swings with main's build on a loaded machine.
cd /work/wt/swing5
for i in 1 2 3 4 5 6; do
  echo "## run $i $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) build main: kvgate bench --workload multiturn --users 256 --policies cache_aware,vllm_cache_aware,round_robin"
  /tmp/kv-main-s5 bench --workload multiturn --users 256 --policies cache_aware,vllm_cache_aware,round_robin 2>&1
done
