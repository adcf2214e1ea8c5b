#!/usr/bin/env bash
# Chunk keys (issue 25): the build before (OLD) and after (NEW) alternating.
# Usage: run.sh OUT OLD_REV NEW_REV, from the repository's root.
set -euo pipefail
out=$1 old=$2 new=$3
mkdir -p "$out"
for b in old new; do
	rev=${!b}
	dir=$(mktemp -d)
	git worktree add -q --detach "$dir" "$rev"
	(cd "$dir" && go build -o "$out/kvgate.$b" ./cmd/kvgate && go test -c -o "$out/bench.$b" ./bench/ && go test -c -o "$out/tree.$b" ./tree/)
	git worktree remove --force "$dir"
done
stamp() { echo "## $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*"; }
for b in old new old new; do
	(cd bench && stamp "$b" && "$out/bench.$b" -test.run '^$' -test.bench MooncakeIndexer -test.benchtime 1x) >> "$out/indexer-$b.txt" 2>&1
done
for b in old new old new; do
	(cd bench && stamp "$b" && "$out/bench.$b" -test.run '^$' -test.bench MooncakeLookupLong -test.benchtime 3x) >> "$out/long-$b.txt" 2>&1
done
for b in old new; do
	(cd tree && stamp "$b" && "$out/tree.$b" -test.run '^$' -test.bench 'Match8K|MatchInsert8K' -test.benchmem &&
		"$out/tree.$b" -test.run '^$' -test.bench 'Memory' -test.benchtime 1x -test.benchmem) >> "$out/tree-$b.txt" 2>&1
done
for spec in "1024 old" "1024 new" "1024 new" "1024 old" "8192 old" "8192 new" "8192 new" "8192 old"; do
	set -- $spec
	(stamp "$2" && "$out/kvgate.$2" bench --overhead --cpu --prompt-tokens "$1") >> "$out/overhead-$1-$2.txt" 2>&1
done
