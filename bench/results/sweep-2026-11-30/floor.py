#!/usr/bin/env python3
"""The fastest first token any router over separate engines can give each of
a trace's requests, and the pooled engine's, at no load.

Each request is credited with everything an unlimited cache shared by every
engine would hold for it (the oracle's match: its longest run of leading
block hashes seen in an earlier request, 512 tokens a block), and what is
left must be prefilled by one engine at the simulator's rate (20,000 tokens
a second; `workers/sim/config.go`), or by the pooled engine at eight times
that. Queueing, decode steps and eviction only add to this, so a fleet's
TTFT percentiles cannot be below these.

  floor.py [REQUESTS]   (default 2,000: the first requests of each trace)
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "testdata", "traces")
BLOCK = 512
RATE = 20000.0
ENGINES = 8


def floors(path, n):
    seen, out = set(), []
    with open(path) as f:
        for line, _ in zip(f, range(n)):
            r = json.loads(line)
            key, matched = (), 0
            for h in r["hash_ids"]:
                key += (h,)
                if key not in seen:
                    break
                matched += 1
            key = ()
            for h in r["hash_ids"]:
                key += (h,)
                seen.add(key)
            out.append(max(0, r["input_length"] - BLOCK * matched) / RATE)
    return sorted(out)


def q(xs, p):
    return xs[int((len(xs) - 1) * p)]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for name in ("conversation", "synthetic"):
        f = floors(os.path.join(TRACES, f"{name}_trace.jsonl"), n)
        print(f"{name}, first {n} requests: one engine p50 {q(f, .5) * 1000:,.0f} ms, p90 {q(f, .9) * 1000:,.0f}, "
              f"p99 {q(f, .99) * 1000:,.0f}; the pooled engine p50 {q(f, .5) * 1000 / ENGINES:,.0f}, "
              f"p99 {q(f, .99) * 1000 / ENGINES:,.0f}")


if __name__ == "__main__":
    main()
