#!/bin/bash
# Real vLLM under eviction pressure, one build at a time (from the repo root):
#   run.sh OUT ROUND BUILD...   each BUILD a kvgate binary at /tmp/qr/BUILD
# Each run starts two fresh vLLM engines of 256 32-token blocks (8,192
# tokens) and routes 32 six-turn conversations with cache_aware, then
# vllm_cache_aware, at --log-level debug; it appends each policy's exact
# predictions and misses by cause to OUT/log.txt.
# The rounds of 2 December: run.sh OUT 1 new old; OUT 1 instr (new with
# polls.patch); OUT 2 full old full old; then rounds 3-5 alternating the
# order (old new, new old, old new); OUT 6 new2 old; OUT 7 partial old
# partial partial.
out=$1; round=$2; shift 2
mkdir -p "$out"
for b in "$@"; do
  echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $b round $round" >> "$out/log.txt"
  ROUTERS=kvgate POLICIES="cache_aware vllm_cache_aware" KVGATE_BIN=/tmp/qr/$b \
    KVGATE_ARGS="--vllm-block-size 32 --log-level debug" VLLM_ARGS="--num-gpu-blocks-override 256" \
    BENCH_WORKLOAD="--workload multiturn --users 32 --rounds 6 --multiturn-system-tokens 512 --question-tokens 64 --answer-tokens 48 --seed 1 --unseeded" \
    scripts/realengine/bench.sh "$out/$b-$round" > "$out/$b-$round.out" 2>&1
  for f in "$out/$b-$round"/*.predictions; do
    echo "$b $round $(basename "$f" .predictions) exact $(grep exact_total "$f" | cut -d' ' -f2) misses: $(grep misses_total "$f" | grep -v ' 0$' | sed 's/.*cause="\(.*\)"} /\1=/' | tr '\n' ' ')" >> "$out/log.txt"
  done
done
