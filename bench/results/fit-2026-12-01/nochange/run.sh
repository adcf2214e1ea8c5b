#!/usr/bin/env bash
# The build before this session's per-engine limits (3e65763) and this one,
# alternating, three rounds, on the workloads where routing must not change.
# KVGATE_OLD and KVGATE_NEW are the two kvgate binaries. Run from the
# repository's root.
set -euo pipefail
d=bench/results/fit-2026-12-01/nochange
for r in 1 2 3; do
	for b in old new; do
		bin=$KVGATE_OLD
		[ "$b" = new ] && bin=$KVGATE_NEW
		"$bin" bench --workload multiturn --users 256 --policies cache_aware > "$d/multiturn-$b-$r.txt" 2>&1
		"$bin" bench --workload shared-prefix --qps 160 --policies round_robin,cache_aware > "$d/shared-prefix-$b-$r.txt" 2>&1
	done
done
