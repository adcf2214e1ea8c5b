#!/usr/bin/env bash
# Does vLLM cache one block under one hash more than once, and evict each
# copy on its own? One real vLLM CPU engine (as scripts/realengine/bench.sh
# starts them: block size 32, 256 blocks, KV events), kvgate in front of it
# (KVGATE_BIN, built with a line printed at each copy it counts: see the
# README here), then:
#   1. COPIES identical greedy requests at once: 64 prompt tokens, 96
#      generated, so each request fills three blocks of output alone;
#   2. FILL requests of distinct 32-token prompts (one block cached each), one at a
#      time, which make vLLM evict its least recently used blocks one by one,
#      the copies among them (FILL=until: until kvgate counts a copy's
#      removal, which needs a build that prints it);
#   3. the first prompt again, followed by its output and 32 tokens more.
# Usage: copies.sh OUT KVGATE_BIN
set -euo pipefail
out=$1 bin=$2
cd "$(dirname "$0")/../../.."
. bench/results/vllm-copies-2026-12-01/engine.sh
serve_one "$out" "$bin" --policy vllm_cache_aware --vllm-block-size 32
"$PY" - "$H" "${COPIES:-4}" "${FILL:-until}" "$out/kvgate.log" >"$out/client.txt" <<'PY'
import json, sys, threading, urllib.request
port, copies, fill, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def generate(ids, n):
    body = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": n, "temperature": 0,
                       "ignore_eos": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)
prompt = list(range(100, 164))
outs = [None] * copies
def one(i):
    outs[i] = generate(prompt, 96)
ts = [threading.Thread(target=one, args=(i,)) for i in range(copies)]
[t.start() for t in ts]; [t.join() for t in ts]
distinct = {tuple(o["output_ids"]) for o in outs}
print(f"{copies} identical greedy requests: {len(distinct)} distinct output(s)")
# Distinct 32-token prompts, one at a time, each caching one block: vLLM
# evicts the least recently used free block for each. "until": stop once kvgate counted a copy's
# removal (a build that prints it); a number: send that many.
k = 0
while (fill == "until" and "KVG-COPY-REMOVE" not in open(log).read()) or (fill != "until" and k < int(fill)):
    generate([1000 + 32 * k + j for j in range(32)], 1)
    k += 1
print(f"{k} distinct 32-token prompts sent")
follow = prompt + list(outs[0]["output_ids"]) + list(range(5000, 5032))
o = generate(follow, 1)
print(f"follow-up of {len(follow)} tokens (the prompt, its output, 32 more): engine cached {o['meta_info']['cached_tokens']}")
PY
cat "$out/client.txt"
grep "cache prediction missed" "$out/kvgate.log" | sed 's/^.*cause=/cause=/' || echo "no prediction missed"
echo "copies counted: stores $(grep -c KVG-COPY-STORE "$out/kvgate.log" || true), removals $(grep -c KVG-COPY-REMOVE "$out/kvgate.log" || true)"
