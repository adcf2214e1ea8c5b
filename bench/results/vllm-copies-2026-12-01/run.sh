#!/usr/bin/env bash
# Real vLLM under eviction pressure, two builds alternating: OLD (the
# build before), NEW (the mirror counting a hash's copies). Usage:
#   run.sh OUT OLD_BIN NEW_BIN [ROUNDS]
set -euo pipefail
out=$1 old=$2 new=$3 rounds=${4:-2}
here=$(cd "$(dirname "$0")/../../.." && pwd)
for r in $(seq 1 "$rounds"); do
  for b in new old; do
    bin=$old; [ "$b" = new ] && bin=$new
    ROUTERS=kvgate POLICIES="vllm_cache_aware cache_aware" KVGATE_BIN=$bin \
      KVGATE_ARGS="--vllm-block-size 32" VLLM_ARGS="--num-gpu-blocks-override 256" \
      BENCH_WORKLOAD="--workload multiturn --users 32 --rounds 6 --multiturn-system-tokens 512 --question-tokens 64 --answer-tokens 48 --seed 1 --unseeded" \
      "$here/scripts/realengine/bench.sh" "$out/$b-$r"
  done
done
