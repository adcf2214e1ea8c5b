#!/usr/bin/env bash
# Memory soak: proves the router's resident memory stays bounded under traffic
# in which every request is new (text, routing key, request id), the traffic
# that grows any unbounded per-request structure: tokenizer caches, routing
# tree, manual-policy keys, rate-limit buckets.
#
# Phases, each against a fresh router (a separate `kvgate serve` process, so
# its RSS is the router's alone) in front of two `kvgate sim` processes:
#   1. --policy cache_aware with a small --max-tree-size, for DURATION;
#   2. --policy manual with --manual-max-keys MANUAL_MAX_KEYS, small enough
#      that the key cap is reached within minutes, for MANUAL_DURATION.
# A duration of 0 skips its phase. Both enable --rate-limit-per-key, so each
# unique routing key makes a bucket (100,000 kept at most).
#
# Every 10 s the router's VmRSS (/proc/PID/status) is sampled into
# OUT/<policy>.csv: time_s,rss_kb,requests_done,heap_inuse_kb,goroutines.
# At the end a summary gives RSS at 1, 5, 10, 20 and 30 minutes, the peak,
# requests sent and their gRPC codes.
#
# Usage: scripts/soak.sh            (from the repository root)
# Environment: DURATION (30m), MANUAL_DURATION (5m), MANUAL_MAX_KEYS (20000),
# QPS (100), CONCURRENCY
# (16), PROMPT_BYTES (4096), MAX_TREE_SIZE (2000000), TIME_SCALE (0),
# OUT (/tmp/soak), PORT_BASE (41700).
set -euo pipefail

DURATION=${DURATION:-30m}
MANUAL_DURATION=${MANUAL_DURATION:-5m}
MANUAL_MAX_KEYS=${MANUAL_MAX_KEYS:-20000}
QPS=${QPS:-100}
CONCURRENCY=${CONCURRENCY:-16}
PROMPT_BYTES=${PROMPT_BYTES:-4096}
MAX_TREE_SIZE=${MAX_TREE_SIZE:-2000000}
TIME_SCALE=${TIME_SCALE:-0}
OUT=${OUT:-/tmp/soak}
PORT_BASE=${PORT_BASE:-41700}

mkdir -p "$OUT"
BIN="$OUT/kvgate"
go build -o "$BIN" ./cmd/kvgate

# shellcheck source=processes.sh
source "$(dirname "$0")/processes.sh"

# to_seconds turns 30m / 90s / 1h into seconds.
to_seconds() {
	local d=$1
	case $d in
	*h) echo $((${d%h} * 3600)) ;;
	*m) echo $((${d%m} * 60)) ;;
	*s) echo "${d%s}" ;;
	*) echo "$d" ;;
	esac
}


# metric prints one unlabelled sample of the router's Prometheus endpoint.
metric() {
	curl -s --max-time 2 "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { printf "%d", $2 }' || true
}

phase() {
	local policy=$1 duration=$2
	shift 2 # the rest: extra serve flags
	local grpc=$PORT_BASE prom=$((PORT_BASE + 9)) s1=$((PORT_BASE + 1)) s2=$((PORT_BASE + 2))
	local csv="$OUT/$policy.csv" log="$OUT/$policy.bench.log"
	"$BIN" sim --port "$s1" --time-scale "$TIME_SCALE" --log-level warn >"$OUT/$policy.sim1.log" 2>&1 &
	pids+=($!)
	"$BIN" sim --port "$s2" --time-scale "$TIME_SCALE" --log-level warn >"$OUT/$policy.sim2.log" 2>&1 &
	pids+=($!)
	wait_port "$s1"
	wait_port "$s2"
	"$BIN" serve --port "$grpc" --prometheus-port "$prom" --worker-urls "127.0.0.1:$s1,127.0.0.1:$s2" \
		--policy "$policy" --max-tree-size "$MAX_TREE_SIZE" --rate-limit-per-key 1000 --log-level warn "$@" \
		>"$OUT/$policy.serve.log" 2>&1 &
	local serve=$!
	pids+=("$serve")
	wait_port "$grpc"
	sleep 2 # the router fetches the tokenizer from the engines

	echo "time_s,rss_kb,requests_done,heap_inuse_kb,goroutines" >"$csv"
	"$BIN" bench --workload unique --target "127.0.0.1:$grpc" --target-metrics "127.0.0.1:$prom" \
		--duration "$duration" --qps "$QPS" --concurrency "$CONCURRENCY" --prompt-bytes "$PROMPT_BYTES" \
		--output-tokens 32 --json "$OUT/$policy.json" >"$OUT/$policy.result.txt" 2>"$log" &
	local bench=$!
	pids+=("$bench")
	local start=$SECONDS
	while kill -0 "$bench" 2>/dev/null; do
		local rss ndone heap g
		rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$serve/status" || true)
		ndone=$(grep -o '[0-9]* requests done' "$log" | tail -1 | cut -d' ' -f1 || true)
		heap=$(metric "$prom" go_memstats_heap_inuse_bytes)
		g=$(metric "$prom" go_goroutines)
		echo "$((SECONDS - start)),$rss,${ndone:-0},$((${heap:-0} / 1024)),${g:-0}" >>"$csv"
		sleep 10
	done
	wait "$bench" || echo "bench failed; see $log" >&2
	curl -s --max-time 2 "http://127.0.0.1:$prom/metrics" | grep -E '^kvgate_(tree_tokens|tree_nodes|tokenizer_cache_(bytes|entries)|admission)' \
		>"$OUT/$policy.final-metrics.txt" || true
	cleanup

	echo "== $policy $*, $duration at $QPS req/s, $CONCURRENCY streams, prompts of $PROMPT_BYTES bytes, --max-tree-size $MAX_TREE_SIZE"
	for m in 1 5 10 20 30; do
		awk -F, -v t=$((m * 60)) 'NR > 1 && $1 >= t { printf "RSS at %2d min: %7d kB (requests %d, heap in use %d kB)\n", t / 60, $2, $3, $4; exit }' "$csv"
	done
	awk -F, 'NR > 1 { last = $0 } END { split(last, f, ","); printf "RSS at end (%d s): %d kB (requests %d, heap in use %d kB)\n", f[1], f[2], f[3], f[4] }' "$csv"
	awk -F, 'NR > 1 && $2 > max { max = $2; at = $1 } END { printf "RSS max: %d kB at %d s\n", max, at }' "$csv"
	cat "$OUT/$policy.result.txt"
	sed 's/^/final: /' "$OUT/$policy.final-metrics.txt"
}

# Not in a pipeline: phase must run in this shell, so the EXIT trap knows
# the processes it started.
: >"$OUT/summary.txt"
if [ "$(to_seconds "$DURATION")" -gt 0 ]; then
	phase cache_aware "$DURATION" >>"$OUT/summary.txt"
fi
if [ "$(to_seconds "$MANUAL_DURATION")" -gt 0 ]; then
	phase manual "$MANUAL_DURATION" --manual-max-keys "$MANUAL_MAX_KEYS" >>"$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
