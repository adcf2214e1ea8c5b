#!/usr/bin/env bash
# The indexer benchmark's lookups before and after a tree node indexes its
# children by key once it has more than 128 (cd50e6a), the two builds
# taking turns, on both traces at 512-token blocks and on the conversation
# trace at 16-token pages.
#
# usage: bench/results/widenode-lookup-2026-12-04/run.sh [rounds] [base rev]   (from the repo root)
set -euo pipefail
rounds=${1:-4}
base=${2:-8bbc71f}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
(cd "$work/base" && go test -c -o "$work/before.test" ./bench/)
(cd "$repo" && go test -c -o "$work/after.test" ./bench/)

for round in $(seq "$rounds"); do
	echo "## round $round, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg)"
	for build in before after; do
		(cd "$repo/bench" && "$work/$build.test" -test.run '^$' -test.benchtime 1x \
			-test.bench 'MooncakeIndexer/trace=(conversation|synthetic)/block=') |
			awk -v build="$build" '/^BenchmarkMooncakeIndexer/ && !/capacity=unreported/ {
				split($1, name, "/"); sub(/-[0-9]+$/, "", name[3]); out = build " " name[2] " " name[3]
				for (i = 3; i < NF; i++) if ($(i+1) ~ /^(lookup-p50-ns|lookup-p99-ns|select-p99-ns|exact|hit)$/) out = out " " $(i+1) "=" $i
				print out }'
	done
done
