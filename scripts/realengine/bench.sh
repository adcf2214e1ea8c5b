#!/usr/bin/env bash
# kvgate and SMG, one after the other, in front of the same two real vLLM
# engines (the CPU build and the tiny model `make real-engines-env` prepares),
# with the same short shared-prefix workload: kvgate:cache_aware,
# smg:cache_aware, kvgate:round_robin, smg:round_robin. Each router is a
# process of its own, started fresh for its run; the engines' prefix caches
# are flushed (FlushCache) before each run, so no run inherits another's,
# and warmed once before the first (see below). A policy listed twice runs
# twice, its second run's files named P.2.
# kvgate is driven through its gRPC Router service, SMG through its HTTP
# /generate with the same token ids (`kvgate bench --target-front smg`).
#
# Usage: scripts/realengine/bench.sh [OUT_DIR]   (make real-engines-bench)
# Environment: KVGATE_CACHE (~/.cache/kvgate), SMG_BIN (the smg launcher),
# KVGATE_BIN (built when unset), BENCH_REQUESTS_PER_GROUP (50: 4 groups of
# 50 requests, 200 per run), ROUTERS ("kvgate smg"), POLICIES
# ("cache_aware round_robin"), ATTACH ("host:port host:port": engines already
# running, started as below, instead of starting two), KVGATE_ARGS (more
# `kvgate serve` flags, e.g. "--vllm-block-size 32" for vllm_cache_aware),
# BENCH_WORKLOAD (the `kvgate bench` workload flags, replacing the
# shared-prefix default below), VLLM_ARGS (more flags for both engines, e.g.
# "--num-gpu-blocks-override 192" for a KV cache of 192 blocks, which
# puts the engines under eviction pressure). A router named kvgate+NAME is kvgate with
# the flags of KVGATE_ARGS_NAME added, so that two settings alternate
# against the same engines (ROUTERS="kvgate kvgate+step"
# KVGATE_ARGS_step="--cache-aware-step-weight 1.5").
#
# Each run writes NAME.txt (the table), NAME.json, NAME.requests.jsonl (every
# request: when sent, its prefix, worker, TTFT; see kvgate bench
# --requests-out), NAME.cpu (the router's and the engines' CPU seconds during
# the run) and, for kvgate, NAME.predictions (its prediction counters and the
# KV events it applied, by type).
#
# The hit rate is the engines' own cached-token counts (vLLM's
# num_cached_tokens, which both routers relay per request) over the prompt
# tokens. Every process this script starts is killed when it exits.
set -euo pipefail

cd "$(dirname "$0")/../.."
CACHE=${KVGATE_CACHE:-$HOME/.cache/kvgate}
PY=$CACHE/vllm-venv/bin/python
MODEL=$CACHE/tiny-qwen3
SMG=${SMG_BIN:-$CACHE/smg-venv/bin/smg}
OUT=${1:-$(mktemp -d -t kvgate-real-bench-XXXXXX)}
PER_GROUP=${BENCH_REQUESTS_PER_GROUP:-50}
ROUTERS=${ROUTERS:-kvgate smg}
POLICIES=${POLICIES:-cache_aware round_robin}
mkdir -p "$OUT"
for need in "$PY" "$MODEL/config.json"; do
	[ -e "$need" ] || { echo "$need is missing: run make real-engines-env" >&2; exit 1; }
done
if [[ " $ROUTERS " == *" smg "* ]] && [ ! -x "$SMG" ]; then
	echo "$SMG is missing: run make smg" >&2
	exit 1
fi

KVGATE=${KVGATE_BIN:-$OUT/kvgate}
if [ -z "${KVGATE_BIN:-}" ]; then
	go build -o "$KVGATE" ./cmd/kvgate
fi

PIDS=()
cleanup() {
	for pid in "${PIDS[@]}"; do
		kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
	done
}
trap cleanup EXIT INT TERM

# start NAME CMD...: runs CMD in a process group of its own (vLLM's engine
# core is a child), its output in $OUT/NAME.log; sets STARTED to its pid.
start() {
	local name=$1
	shift
	setsid "$@" >"$OUT/$name.log" 2>&1 &
	STARTED=$!
	PIDS+=("$STARTED")
}

# cpu_ticks PID...: the CPU time (user + system, in clock ticks) of every
# process in the process groups these pids lead: an engine with its engine
# core, a router. On two cores every tick a router spends is one the engines
# do not get, so each run records both.
cpu_ticks() {
	local total=0 pg t
	for pg in "$@"; do
		# cat, not awk on the files: a process that exits between the glob
		# and its read is skipped, where awk gave up and printed nothing.
		# Fields are counted after the command name, which may hold spaces.
		t=$(cat /proc/[0-9]*/stat 2>/dev/null |
			awk -v g="$pg" '{ sub(/^.*\) /, "") } $3 == g { t += $12 + $13 } END { print t + 0 }')
		total=$((total + ${t:-0}))
	done
	echo "$total"
}

stop() {
	kill -9 -- "-$1" 2>/dev/null || kill -9 "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# free_loopback_ports N: N distinct loopback ports free at the time of the
# call, on one line. All N sockets are open at once, so no two are equal.
free_loopback_ports() {
	"$PY" -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))' "$1"
}

ENGINE_PIDS=() # the engines this script starts (none with ATTACH)
if [ -n "${ATTACH:-}" ]; then
	read -r -a ENGINES <<<"$ATTACH"
	[ "${#ENGINES[@]}" -eq 2 ] || { echo "ATTACH=\"$ATTACH\": want two host:port" >&2; exit 1; }
else
	# Free loopback ports: the engines' gRPC ports and their ZMQ publishers'.
	read -r E0 E1 Z0 Z1 < <(free_loopback_ports 4)

	# The engines as test/realengine starts them: float32, block size 32 (vLLM's
	# CPU attention takes multiples of 32 only), prefix caching, KV events, one
	# compute thread and 1 GiB of KV cache each.
	ENGINES=()
	read -r -a VLLM_EXTRA <<<"${VLLM_ARGS:-}"
	i=0
	for port in $E0 $E1; do
		events=$(( port == E0 ? Z0 : Z1 ))
		start "vllm-$i" env VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \
			VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
			"$PY" -m vllm.entrypoints.launchers.grpc_server --model "$MODEL" --served-model-name tiny-qwen3 \
			--host 127.0.0.1 --port "$port" --dtype float32 --max-model-len 4096 --block-size 32 \
			--enable-prefix-caching --enforce-eager --max-num-seqs 16 \
			--kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$events\"}" \
			"${VLLM_EXTRA[@]}"
		ENGINES+=("127.0.0.1:$port")
		ENGINE_PIDS+=("$STARTED")
		i=$((i + 1))
	done
	echo "bench: starting two vLLM engines (logs in $OUT; minutes on a busy machine)" >&2
	"$PY" scripts/realengine/engine_ctl.py wait-engines 1500 "${ENGINES[@]}"
fi
URLS="grpc://${ENGINES[0]},grpc://${ENGINES[1]}"

# --unseeded: vLLM's CPU build dies on a seeded request whose prefill is
# split ("CPU Generator does not use offset").
WORKLOAD=(--workload shared-prefix --groups 4 --prompts-per-group "$PER_GROUP" --system-tokens 1024
	--question-tokens 64 --output-tokens 16 --concurrency 8 --seed 1 --unseeded)
if [ -n "${BENCH_WORKLOAD:-}" ]; then
	read -r -a WORKLOAD <<<"$BENCH_WORKLOAD"
fi
read -r -a EXTRA <<<"${KVGATE_ARGS:-}"

# free_ports: two free loopback ports into PORT and METRICS.
free_ports() {
	read -r PORT METRICS < <(free_loopback_ports 2)
}

# serve_kvgate NAME POLICY [FLAG...]: kvgate serve in front of the
# engines, on PORT and METRICS, until it answers SERVING; sets pid.
serve_kvgate() {
	start "$1" "$KVGATE" serve --host 127.0.0.1 --port "$PORT" --prometheus-port "$METRICS" \
		--worker-urls "$URLS" --policy "$2" --wait-for-workers --log-level warn "${EXTRA[@]}" "${@:3}"
	pid=$STARTED
	"$PY" scripts/realengine/engine_ctl.py wait-serving 120 "127.0.0.1:$PORT"
}

# Warm the engines first: a fresh vLLM engine's first requests can run
# several times slower than later ones (without this, the first run's
# opening burst of eight took 2.1 s on the engine that had served nothing,
# where the next run's took 0.07-0.62 s), which lands on whichever
# run goes first.
# The same workload with another seed (other prompts), 32 requests, through
# round_robin so both engines get them; its caches are flushed below.
free_ports
serve_kvgate warmup round_robin
"$KVGATE" bench --target "127.0.0.1:$PORT" --target-label warmup "${WORKLOAD[@]}" --seed 97 --requests 32 \
	>"$OUT/warmup.txt" 2>&1 || { echo "bench: the warm-up run failed; see $OUT/warmup.txt" >&2; exit 1; }
stop "$pid"

for policy in $POLICIES; do
	for router in $ROUTERS; do
		label=$router:$policy
		# A policy listed again (alternating runs) writes files of its own:
		# kvgate-P, kvgate-P.2, ...
		name=$router-$policy
		n=1
		while [ -e "$OUT/$name.json" ]; do
			n=$((n + 1))
			name=$router-$policy.$n
		done
		"$PY" scripts/realengine/engine_ctl.py flush "${ENGINES[@]}"
		free_ports
		case $router in
		kvgate | kvgate+*)
			variant=()
			if [ "$router" != kvgate ]; then
				args=KVGATE_ARGS_${router#kvgate+}
				read -r -a variant <<<"${!args:-}"
			fi
			serve_kvgate "$name" "$policy" "${variant[@]}"
			front=()
			;;
		smg)
			start "$name" "$SMG" launch --host 127.0.0.1 --port "$PORT" \
				--worker-urls "grpc://${ENGINES[0]}" "grpc://${ENGINES[1]}" --policy "$policy" \
				--tokenizer-path "$MODEL" --prometheus-host 127.0.0.1 --prometheus-port "$METRICS" --log-level warn
			pid=$STARTED
			ok=
			for _ in $(seq 120); do
				if curl -sf -m 30 "http://127.0.0.1:$PORT/generate" -H 'Content-Type: application/json' \
					-d '{"model":"tiny-qwen3","input_ids":[1000],"sampling_params":{"max_new_tokens":1}}' >/dev/null; then
					ok=1
					break
				fi
				sleep 1 # SMG is another process: asking again is the signal
			done
			[ -n "$ok" ] || { echo "bench: SMG did not answer /generate; see $OUT/$name.log" >&2; exit 1; }
			front=(--target-front smg --target-model tiny-qwen3)
			# The readiness request warmed a block: start from empty caches.
			"$PY" scripts/realengine/engine_ctl.py flush "${ENGINES[@]}"
			;;
		esac
		router0=$(cpu_ticks "$pid")
		engines0=$(cpu_ticks "${ENGINE_PIDS[@]}")
		"$KVGATE" bench --target "127.0.0.1:$PORT" --target-label "$label" "${front[@]}" "${WORKLOAD[@]}" \
			--json "$OUT/$name.json" --requests-out "$OUT/$name.requests.jsonl" | tee "$OUT/$name.txt"
		awk -v l="$label" -v hz="$(getconf CLK_TCK)" -v r="$(( $(cpu_ticks "$pid") - router0 ))" \
			-v e="$(( $(cpu_ticks "${ENGINE_PIDS[@]}") - engines0 ))" \
			'BEGIN { printf "%s: CPU seconds during the run: router %.1f, engines %.1f\n", l, r / hz, e / hz }' | tee "$OUT/$name.cpu"
		if [ "$router" != smg ]; then
			# kvgate's own account of its predictions against the engines'
			# reports, and the KV events it applied (removals show eviction).
			curl -sf "http://127.0.0.1:$METRICS/metrics" | grep -E '^kvgate_(cache_prediction|kv_events_applied)' \
				>"$OUT/$name.predictions" || true
		fi
		stop "$pid"
	done
done
echo "bench: results in $OUT (*.txt tables, *.json reports)" >&2
