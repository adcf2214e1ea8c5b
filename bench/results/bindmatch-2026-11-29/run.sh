#!/bin/bash
# usage: run.sh name build args...
name=$1; b=$2; shift 2
R=/work/wt/bindmatch/bench/results/bindmatch-2026-11-29
cd /work/wt/bindmatch
echo "=== $name $b start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log.txt
/tmp/kv-$b bench --workload trace --requests 2000 --slo-ttft 2s --max-running 8 "$@" --json $R/$name.json > $R/$name.txt 2>&1
echo "=== $name $b done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $R/log.txt
