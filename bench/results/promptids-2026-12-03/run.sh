#!/usr/bin/env bash
# The prompt's token ids read and written by internal/pbwire: the router's
# CPU per fresh 1K-token request (mirror off) against the build before,
# taking turns; steady-state profiles of both; and the codec benchmark.
# Outputs go beside this script.
#
# usage: bench/results/promptids-2026-12-03/run.sh [base rev]   (from the repo root)
set -euo pipefail
base=${1:-c07f416}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
(cd "$work/base" && go build -o "$work/old" ./cmd/kvgate)
(cd "$repo" && go build -o "$work/new" ./cmd/kvgate)

"$work/new" bench --overhead --cpu --prompt-tokens 1024 --compare-binary "$work/old" --cpu-rounds 10 \
  --router-args='--kv-events off' > "$here/newold-off-1k.txt" 2>&1

# One 20 s profile of each build's router, 12 s into the tokens case.
for b in old new; do
  "$work/$b" bench --overhead --cpu --prompt-tokens 1024 --cpu-budget 30s --router-pprof-addr 127.0.0.1:6063 \
    --router-args=--kv-events=off > "$work/$b.log" 2>&1 &
  pid=$!
  until curl -s -o /dev/null http://127.0.0.1:6063/debug/pprof/; do sleep 1; done
  sleep 12
  curl -s -o "$work/$b.prof" 'http://127.0.0.1:6063/debug/pprof/profile?seconds=20'
  kill "$pid"; wait "$pid" 2>/dev/null || true
  pkill -f "$work/$b serve" || true; pkill -f "$work/$b sim" || true
done
for b in old new; do
  echo "== $b"
  go tool pprof -top -cum -nodefraction=0 "$work/$b" "$work/$b.prof" 2>/dev/null | grep -E \
    "Total samples|requestCodec.\)?Unmarshal$|promptCodec.\)?Marshal$|codecV2\).Marshal$|codecV2\).Unmarshal$|sglangBackend\).Generate$|SplitPacked$|AppendPacked$|consumeUint32Slice$|appendUint32PackedSlice$|Generate_Handler$|Server\).handleStream$"
done > "$here/profiles.txt"

(cd "$repo" && go test -run '^$' -bench Prompt -benchmem -count 5 ./internal/pbwire/) > "$here/codec-bench.txt" 2>&1
