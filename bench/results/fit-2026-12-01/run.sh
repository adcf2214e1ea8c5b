#!/usr/bin/env bash
# The per-request check of a prompt's length against the fleet: the build
# before per-engine limits (3e65763: one pass, the smallest limits) against
# this one (BenchmarkFit: a pass before the queue and one at placement),
# alternating, three rounds. Run from the repository's root.
set -euo pipefail
old=$(mktemp -d)
git worktree add -q "$old" 3e65763
cp bench/results/fit-2026-12-01/fit_old_bench_test.go.txt "$old/pipeline/fit_old_bench_test.go"
(cd "$old" && go test -c -o /tmp/fit-old.test ./pipeline/)
go test -c -o /tmp/fit-new.test ./pipeline/
git worktree remove --force "$old"
for r in 1 2 3; do
	for b in old new; do
		/tmp/fit-$b.test -test.run '^$' -test.bench Fit -test.benchmem | grep '^Benchmark' | awk -v b=$b -v r=$r '{print r, b, $1, $3, $4}'
	done
done
