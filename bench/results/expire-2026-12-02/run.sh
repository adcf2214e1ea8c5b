#!/usr/bin/env bash
# Expiring a speculative insert its engine's KV events confirmed, before
# (the descent along the prompt's path) and after (the node the insert
# ended at, read by tick): the tree's own benchmark on both builds, then
# the router's CPU per fresh 1K-token request with the mirror on, builds
# alternating. Outputs go beside this script.
#
# usage: bench/results/expire-2026-12-02/run.sh [rounds] [base rev]   (from the repo root)
set -euo pipefail
rounds=${1:-7}
base=${2:-4220176}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
# The benchmark is new with the change: the base runs the same file.
cp "$repo/tree/bench_test.go" "$work/base/tree/bench_test.go"
(cd "$work/base" && go build -o "$work/old" ./cmd/kvgate)
(cd "$repo" && go build -o "$work/new" ./cmd/kvgate)

for build in old new; do
	dir=$repo; [ "$build" = old ] && dir=$work/base
	(cd "$dir" && go test -run '^$' -bench ExpireConfirmed -count 3 ./tree/) | grep '^Benchmark' |
		sed "s/^/$build /" >> "$here/tree-bench.txt"
done

for round in $(seq "$rounds"); do
	order="old new"; [ $((round % 2)) = 0 ] && order="new old"
	for build in $order; do
		out="$here/overhead-$round-$build.txt"
		echo "# $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg)" > "$out"
		"$work/$build" bench --overhead --cpu --prompt-tokens 1024 >> "$out" 2>&1
	done
done
