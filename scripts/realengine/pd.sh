#!/usr/bin/env bash
# Prefill/decode disaggregation with real vLLM on CPU: two vLLM gRPC engines
# with vLLM's NixlConnector (NIXL over UCX, KV in host memory), kvgate serve
# --pd-disaggregation in front (the first engine prefills, the second
# decodes), and a few shared-prefix requests through kvgate. It passes when
# every request succeeds, the router has learned the prefill engine's rate
# and the decode engine's step from the legs, and the decode engine reports
# NIXL transfers of the prefill's KV ("KV Transfer metrics: Num successful
# transfers=N").
#
# Usage: scripts/realengine/pd.sh [OUT_DIR]   (make real-engines-pd)
# Environment: KVGATE_CACHE (~/.cache/kvgate), NIXL_SITE (the directory
# `make real-engines-nixl` installs nixl into, put on the engines'
# PYTHONPATH), KVGATE_BIN (built when unset). Every process it starts is
# killed when it exits.
set -euo pipefail

cd "$(dirname "$0")/../.."
CACHE=${KVGATE_CACHE:-$HOME/.cache/kvgate}
PY=$CACHE/vllm-venv/bin/python
MODEL=$CACHE/tiny-qwen3
NIXL_SITE=${NIXL_SITE:-$CACHE/nixl-site}
OUT=${1:-$(mktemp -d -t kvgate-real-pd-XXXXXX)}
mkdir -p "$OUT"
for need in "$PY" "$MODEL/config.json" "$NIXL_SITE/nixl/__init__.py"; do
	[ -e "$need" ] || { echo "$need is missing: run make real-engines-env real-engines-nixl" >&2; exit 1; }
done
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

# start NAME CMD...: runs CMD in a process group of its own, its output in
# $OUT/NAME.log.
start() {
	local name=$1
	shift
	setsid "$@" >"$OUT/$name.log" 2>&1 &
	PIDS+=("$!")
}

# Free loopback ports: two engines, their NIXL side channels, kvgate's front
# and metrics.
read -r P0 P1 S0 S1 PORT METRICS < <("$PY" -c 'import socket
s=[socket.socket() for _ in range(6)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*(x.getsockname()[1] for x in s))')

# kv_both is what vLLM's NIXL examples use for either side (its prefill or
# decode role comes from each request's kv_transfer_params, which kvgate
# sets); kv_buffer_device cpu because the KV lives in host memory here.
i=0
for port in $P0 $P1; do
	side=$(( port == P0 ? S0 : S1 ))
	start "vllm-pd-$i" env PYTHONPATH="$NIXL_SITE" VLLM_NIXL_SIDE_CHANNEL_HOST=127.0.0.1 VLLM_NIXL_SIDE_CHANNEL_PORT="$side" \
		VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 \
		VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
		"$PY" -m vllm.entrypoints.launchers.grpc_server --model "$MODEL" --served-model-name tiny-qwen3 \
		--host 127.0.0.1 --port "$port" --dtype float32 --max-model-len 4096 --block-size 32 \
		--enforce-eager --max-num-seqs 16 \
		--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}'
	i=$((i + 1))
done
echo "pd: starting two vLLM engines with NixlConnector (logs in $OUT; minutes on a busy machine)" >&2
"$PY" scripts/realengine/engine_ctl.py wait-engines 1500 "127.0.0.1:$P0" "127.0.0.1:$P1"

start kvgate "$KVGATE" serve --pd-disaggregation --worker-urls "grpc://127.0.0.1:$P0" --decode "grpc://127.0.0.1:$P1" \
	--host 127.0.0.1 --port "$PORT" --prometheus-port "$METRICS" --wait-for-workers --log-level info
"$PY" scripts/realengine/engine_ctl.py wait-serving 120 "127.0.0.1:$PORT"

# --unseeded: vLLM's CPU build dies on a seeded request whose prefill is split.
# System prompts of 1,024 tokens: each group's first prefill is long enough
# to time the prefill engine's rate.
"$KVGATE" bench --target "127.0.0.1:$PORT" --target-label kvgate:pd --workload shared-prefix \
	--groups 2 --prompts-per-group 3 --system-tokens 1024 --question-tokens 16 --output-tokens 8 \
	--concurrency 1 --unseeded --json "$OUT/pd.json" | tee "$OUT/pd.txt"
errors=$("$PY" -c 'import json,sys; print(sum(r["errors"] for r in json.load(open(sys.argv[1]))["runs"]))' "$OUT/pd.json")
[ "$errors" = 0 ] || { echo "pd: $errors requests failed; see $OUT/kvgate.log" >&2; exit 1; }

# The legs taught the router each engine's speed: the prefill engine's rate
# from its legs, the decode engine's step from its.
"$PY" - "http://127.0.0.1:$METRICS/metrics" "grpc://127.0.0.1:$P0" "grpc://127.0.0.1:$P1" <<'PY' | tee "$OUT/learned.txt" >&2
import sys, urllib.request
url, prefill, decode = sys.argv[1:]
text = urllib.request.urlopen(url, timeout=10).read().decode()
want = {f'kvgate_worker_prefill_tokens_per_second{{worker="{prefill}"}}': "the prefill engine's rate",
        f'kvgate_worker_decode_step_seconds{{worker="{decode}"}}': "the decode engine's step"}
missing = []
for series, what in want.items():
    line = next((l for l in text.splitlines() if l.startswith(series + " ")), None)
    if line is None:
        missing.append(f"{what} ({series})")
    else:
        print(f"pd: learned {what}: {line}")
if missing:
    print("pd: the router learned no " + ", no ".join(missing), file=sys.stderr)
    sys.exit(1)
PY

# vLLM logs its KV transfer metrics every 10 s: wait for the decode engine's.
for _ in $(seq 30); do
	if grep -q "KV Transfer metrics: Num successful transfers=[1-9]" "$OUT/vllm-pd-1.log"; then
		grep "KV Transfer metrics" "$OUT/vllm-pd-1.log" | sed 's/^.*KV Transfer metrics/pd: decode engine: KV Transfer metrics/' >&2
		echo "pd: ok: every request through kvgate's prefill/decode pair, the KV moved by NIXL (logs in $OUT)" >&2
		exit 0
	fi
	sleep 1 # the engine is another process: its log is the signal
done
echo "pd: the decode engine reported no NIXL transfer; see $OUT/vllm-pd-1.log" >&2
exit 1
