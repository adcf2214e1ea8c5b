#!/usr/bin/env bash
# The conversation trace's first 1,000 requests at speed 1 on four simulated
# engines whose KV caches hold 80,000 tokens each: a fleet size and a cache
# size no setting of the default was chosen on. About 23 minutes on two cores.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
go build -o /tmp/kvgate ./cmd/kvgate
/tmp/kvgate bench --workload trace --trace bench/testdata/traces/conversation_trace.jsonl \
  --speed 1 --requests 1000 --workers 4 --kv-capacity-tokens 80000 --slo-ttft 2s \
  --policies cache_aware,round_robin,cache_aware:cost,pooled > bench/results/kv80-2026-12-01/speed1.txt 2>&1
python3 bench/results/kv80-2026-12-01/prompts.py bench/testdata/traces/conversation_trace.jsonl \
  > bench/results/kv80-2026-12-01/prompts.txt
