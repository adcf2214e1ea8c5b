#!/usr/bin/env bash
# The fronts taking turns in one run (kvgate bench --overhead --cpu
# --compare-*): the KV event mirror on against off, at 1K and 8K tokens,
# and this build against the one before the speculation-expiry change,
# with the default collector and with GOGC=800. Outputs go beside this
# script.
#
# usage: bench/results/alternating-2026-12-02/run.sh [base rev]   (from the repo root)
set -euo pipefail
base=${1:-4220176}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
(cd "$work/base" && go build -o "$work/old" ./cmd/kvgate)
(cd "$repo" && go build -o "$work/new" ./cmd/kvgate)

"$work/new" bench --overhead --cpu --compare-router-args '--kv-events off' > "$here/onoff-1k.txt" 2>&1
"$work/new" bench --overhead --cpu --compare-binary "$work/old" > "$here/newold-1k.txt" 2>&1
GOGC=800 "$work/new" bench --overhead --cpu --compare-binary "$work/old" --cpu-rounds 6 > "$here/newold-1k-gogc800.txt" 2>&1
"$work/new" bench --overhead --cpu --compare-router-args '--kv-events off' --prompt-tokens 8192 --cpu-rounds 5 > "$here/onoff-8k.txt" 2>&1
