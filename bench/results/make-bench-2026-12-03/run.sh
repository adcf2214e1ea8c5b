#!/bin/bash
# make bench on main and on the build of the last make bench (0f17eeb,
# 2026-12-02), one after the other, each from a worktree of its own; the
# outputs go to OUT/new and OUT/old.
#   bench/results/make-bench-2026-12-03/run.sh OUT [base rev]
set -euo pipefail
out=$(realpath -m "${1:?usage: run.sh OUT [base rev]}")
base=${2:-0f17eeb}
repo=$(git rev-parse --show-toplevel)
mkdir -p "$out"
for b in new:HEAD "old:$base"; do
	name=${b%%:*} rev=${b#*:}
	wt=$(mktemp -d)
	git -C "$repo" worktree add -q --detach "$wt" "$rev"
	git -C "$wt" log --oneline -1 >"$out/$name.when"
	date -u >>"$out/$name.when"
	uptime >>"$out/$name.when"
	(cd "$wt" && make bench BENCH_RESULTS="$out/$name") >"$out/$name.log" 2>&1
	date -u >>"$out/$name.when"
	uptime >>"$out/$name.when"
	git -C "$repo" worktree remove --force "$wt"
done
