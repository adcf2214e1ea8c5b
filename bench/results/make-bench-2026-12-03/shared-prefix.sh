#!/bin/bash
# make bench's two shared-prefix rows again, the two builds taking turns:
# NEW and OLD are kvgate binaries (this build, 0f17eeb), OUT a directory.
#   bench/results/make-bench-2026-12-03/shared-prefix.sh NEW OLD OUT [ROUNDS]
set -euo pipefail
new=${1:?NEW} old=${2:?OLD} out=${3:?OUT} rounds=${4:-3}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
	for b in new old; do
		bin=$new
		[ "$b" = old ] && bin=$old
		{ date -u; uptime; } >"$out/$b-$r.txt"
		"$bin" bench --workload shared-prefix --qps 4 --requests 128 --policies round_robin,cache_aware >>"$out/$b-$r.txt" 2>&1
		"$bin" bench --workload shared-prefix --qps 160 --policies cache_aware,cache_aware:threshold:smallest_tree,round_robin >>"$out/$b-$r.txt" 2>&1
	done
done
