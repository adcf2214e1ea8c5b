#!/usr/bin/env bash
# Admission control figures: at what load the router starts refusing, and the
# latency of the requests it still admits.
#
# Two `kvgate sim` processes at real time scale (so requests take time and
# pile up) sit behind a `kvgate serve` process. Each step opens N streams at
# once, one unique text request each (kvgate bench --workload unique
# --requests N --concurrency N), and reports admitted and refused
# (RESOURCE_EXHAUSTED) requests, TTFT of the admitted ones and the router's
# peak goroutines (go_goroutines, sampled every 200 ms).
#   1. --max-concurrent-requests 64 --queue-size 64, steps STEPS;
#   2. the default limits (1024/1024), one step of BIG streams: the issue's
#      original finding was 8,000 streams all accepted, TTFT p99 10.9 s and
#      16k goroutines;
#   3. no limits (--max-concurrent-requests -1), the same BIG streams: the
#      issue's setting, on this machine and workload, for comparison.
#
# Usage: scripts/admission.sh       (from the repository root)
# Environment: STEPS ("32 64 128 256 512 2048"), BIG (8000), PROMPT_BYTES
# (1024), OUTPUT_TOKENS (64), OUT (/tmp/admission), PORT_BASE (41800),
# UNLIMITED (1). An empty STEPS, BIG=0 or UNLIMITED=0 skips that phase.
set -euo pipefail

STEPS=${STEPS-32 64 128 256 512 2048}
BIG=${BIG:-8000}
PROMPT_BYTES=${PROMPT_BYTES:-1024}
OUTPUT_TOKENS=${OUTPUT_TOKENS:-64}
OUT=${OUT:-/tmp/admission}
PORT_BASE=${PORT_BASE:-41800}

mkdir -p "$OUT"
BIN="$OUT/kvgate"
go build -o "$BIN" ./cmd/kvgate

# shellcheck source=processes.sh
source "$(dirname "$0")/processes.sh"


# fleet starts two real-time simulated engines and a router with the given
# extra serve flags.
fleet() {
	local s1=$((PORT_BASE + 1)) s2=$((PORT_BASE + 2))
	"$BIN" sim --port "$s1" --log-level warn >"$OUT/sim1.log" 2>&1 &
	pids+=($!)
	"$BIN" sim --port "$s2" --log-level warn >"$OUT/sim2.log" 2>&1 &
	pids+=($!)
	wait_port "$s1"
	wait_port "$s2"
	"$BIN" serve --port "$PORT_BASE" --prometheus-port $((PORT_BASE + 9)) \
		--worker-urls "127.0.0.1:$s1,127.0.0.1:$s2" --log-level error "$@" >"$OUT/serve.log" 2>&1 &
	pids+=($!)
	wait_port "$PORT_BASE"
	sleep 2 # the router fetches the tokenizer from the engines
}

# step opens $1 streams at once and prints one table row.
step() {
	local n=$1 label=$2
	"$BIN" bench --workload unique --target "127.0.0.1:$PORT_BASE" --target-metrics "127.0.0.1:$((PORT_BASE + 9))" \
		--requests "$n" --concurrency "$n" --prompt-bytes "$PROMPT_BYTES" --output-tokens "$OUTPUT_TOKENS" \
		--chat-every 0 --json "$OUT/${label//\//-}-$n.json" >"$OUT/${label//\//-}-$n.txt" 2>/dev/null
	jq -r --arg l "$label" --argjson n "$n" \
		'"| \($l) | \($n) | \(.sent - .refused) | \(.refused) | \(.codes | to_entries | map(select(.key != "OK" and .key != "ResourceExhausted")) | map("\(.key)=\(.value)") | join(" ") | if . == "" then "-" else . end) | \(.ttft_ms.p50 | floor) | \(.ttft_ms.p99 | floor) | \(.refused_ms.p99 * 10 | floor / 10) | \(.goroutines_idle) | \(.goroutines_peak) |"' \
		"$OUT/${label//\//-}-$n.json"
	sleep 3 # let the engines drain and the router's goroutines exit
}

echo "| limits | streams | admitted | refused | other codes | TTFT p50 ms | TTFT p99 ms | refused in p99 ms | goroutines idle | goroutines peak |"
echo "|---|---|---|---|---|---|---|---|---|---|"
if [ -n "$STEPS" ]; then
	fleet --max-concurrent-requests 64 --queue-size 64
	for n in $STEPS; do
		step "$n" 64/64
	done
	cleanup
fi
if [ "$BIG" -gt 0 ]; then
	fleet
	step "$BIG" 1024/1024
	cleanup
	if [ "${UNLIMITED:-1}" = 1 ]; then
		fleet --max-concurrent-requests -1
		step "$BIG" none
		cleanup
	fi
fi
