#!/usr/bin/env bash
# The router's CPU per fresh 1K-token request after the three changes of
# 3 December (the prompt's ids through pbwire, the stack reserves in
# assembly, wide nodes indexed), against the build before them, taking
# turns with it and the relay; and the mirror on against off.
# Outputs go beside this script.
#
# usage: bench/results/session-2026-12-03/run.sh [base rev]   (from the repo root)
set -euo pipefail
base=${1:-c07f416}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add --detach "$work/base" "$base" >/dev/null 2>&1
(cd "$work/base" && go build -o "$work/old" ./cmd/kvgate)
(cd "$repo" && go build -o "$work/new" ./cmd/kvgate)

"$work/new" bench --overhead --cpu --prompt-tokens 1024 --compare-binary "$work/old" --cpu-rounds 16 \
  --router-args='--kv-events off' > "$here/newold-off-1k.txt" 2>&1
"$work/new" bench --overhead --cpu --prompt-tokens 1024 --compare-router-args '--kv-events off' \
  --cpu-rounds 12 > "$here/onoff-1k.txt" 2>&1
"$work/new" bench --overhead --cpu --prompt-tokens 1024 --compare-binary "$work/old" --cpu-rounds 12 \
  > "$here/newold-on-1k.txt" 2>&1
