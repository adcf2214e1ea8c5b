#!/bin/sh
# Alternates the main build (old: git archive of main plus
# policy/pending_bench_test.go) and this branch's (new) of ./policy's test
# binary, 5 pairs; each run logs its UTC start and load average. Built with
#   (cd /tmp/oldsrc && go test -c -o /tmp/old.test ./policy/)
#   go test -c -o /tmp/new.test ./policy/
for pair in 1 2 3 4 5; do
  for b in old new; do
    echo "== $b pair $pair $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/$b.test -test.run '^$' -test.bench 'ScoredSelectionWhilePending' -test.benchtime 20000x -test.benchmem
    /tmp/$b.test -test.run '^$' -test.bench 'SelectionByFleetSize/policy=cache_aware/workers=(10|1000)/op=select' -test.benchtime 20000x -test.benchmem
  done
done
