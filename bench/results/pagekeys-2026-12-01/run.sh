#!/usr/bin/env bash
# The indexer's lookup with the prompt's page keys given, as Dynamo's indexer is
# given the trace's block hashes, against the lookup that hashes the prompt
# (main). Run from the repository's root with pagekeys.patch applied:
#   git apply bench/results/pagekeys-2026-12-01/pagekeys.patch
#   bench/results/pagekeys-2026-12-01/run.sh > bench/results/pagekeys-2026-12-01/runs.txt
# Alternating, four rounds; each line is one replay of the conversation trace at
# 512-token blocks among 128 workers.
set -euo pipefail
go test -c -o /tmp/pagekeys-bench.test ./bench/
cd bench
for round in 1 2 3 4; do
	for mode in hash given; do
		env=()
		[ "$mode" = given ] && env=(KVGATE_PAGEKEYS_EXP=1)
		# Both conversation cases at 512-token blocks: capacity reported, and
		# unreported.
		env "${env[@]}" /tmp/pagekeys-bench.test -test.run '^$' -test.bench 'MooncakeIndexer/trace=conversation/block=512$' -test.benchtime 1x |
			awk -v r="$round" -v m="$mode" '/^Benchmark/ {
				for (i = 1; i < NF; i++) { if ($(i+1) == "lookup-p50-ns") p50 = $i; if ($(i+1) == "lookup-p99-ns") p99 = $i }
				print "round " r " " m " " $1 " lookup-p50-ns " p50 " lookup-p99-ns " p99 }'

	done
done
