#!/bin/sh
# MT128 (a small-cache workload of make bench's kind): this build (NEW,
# removals remembered by their first page) and the build before (OLD,
# e8ae950), taking turns, five rounds each, 13:15-13:18 UTC.
set -eu
NEW=$1 OLD=$2
for i in 1 2 3 4 5; do
  "$NEW" bench --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware > new-$i.txt 2>&1
  "$OLD" bench --workload multiturn --users 128 --workers 4 --kv-capacity-tokens 40000 --policies cache_aware > old-$i.txt 2>&1
done
