#!/usr/bin/env bash
# kvgate's indexer benchmark and Dynamo's indexers (dynamo-kv-router 1.6.1
# from crates.io) on the same replay, alternating, on one machine.
#
# The Go benchmark routes the Mooncake traces among 128 workers (both
# traces at 512-token blocks, the trace's own; the conversation trace's
# first 2,000 requests at kvgate's default 16-token pages) and writes what
# it did (every lookup, the worker chosen,
# what that engine held, the KV events of serving it) to a script; the Rust
# harness in bench/dynamo-indexer follows the script with Dynamo's RadixTree
# and its ConcurrentRadixTreeCompressed (behind a ThreadPoolIndexer with one
# event thread, flushed before each lookup), checks each lookup found what
# the engine held, and times find_matches alone and after hashing the
# prompt's tokens into block hashes as Dynamo's router does first.
# Dynamo's PositionalIndexer is left out: it needs the engines' block hashes
# made with its own hasher (its README), and the simulated engines name
# pages with their own.
#
# usage: bench/results/dynamo-indexer-2026-12-01/run.sh [rounds]   (from the repo root)
set -euo pipefail
rounds=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$repo"
go test -c -o "$work/bench.test" ./bench/
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kvgate/dynamo-indexer-target}" \
	cargo build --release --locked --manifest-path bench/dynamo-indexer/Cargo.toml
replay="${CARGO_TARGET_DIR:-$HOME/.cache/kvgate/dynamo-indexer-target}/release/dynamo-indexer-replay"

pattern='MooncakeIndexer/trace=(conversation|synthetic)/block='
# The scripts: one run of kvgate's benchmark that writes them (not timed here).
(cd bench && KVGATE_INDEXER_SCRIPT="$work" "$work/bench.test" -test.run '^$' \
	-test.bench "$pattern" -test.benchtime 1x > /dev/null)

for round in $(seq "$rounds"); do
	echo "## round $round, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg)"
	# kvgate's lookup hashes the prompt's matching chunks as it descends, so
	# its figures compare with Dynamo's hash+find.
	(cd bench && "$work/bench.test" -test.run '^$' -test.bench "$pattern" -test.benchtime 1x) |
		awk '/^BenchmarkMooncakeIndexer/ && !/capacity=unreported/ {
			split($1, name, "/"); sub(/-[0-9]+$/, "", name[3]); out = "kvgate " name[2] " " name[3]
			for (i = 3; i < NF; i++) if ($(i+1) ~ /^(lookup-p50-ns|lookup-p99-ns|ops\/s|exact)$/) out = out " " $(i+1) "=" $i
			print out }'
	for script in conversation-512 synthetic-512 conversation-16; do
		for indexer in radix compressed; do
			echo "dynamo trace=${script%-*} $("$replay" "$work/$script.script" "${script#*-}" "$indexer")"
		done
	done
done
