#!/bin/bash
# alternate builds; usage: bench.sh outdir rounds builds...
out=$1; rounds=$2; shift 2
mkdir -p $out
for r in $(seq 1 $rounds); do
  for b in "$@"; do
    echo "=== round $r build $b $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $out/$b.txt
    (cd /work/wt/picklog/policy && /tmp/picklog/$b.test -test.run '^$' -test.bench 'SelectionByFleetSize/policy=cache_aware/workers=(1000|4000)/op=(select|request)' -test.benchmem -test.benchtime 3000x) >> $out/$b.txt 2>&1
  done
done
echo done > $out/DONE
