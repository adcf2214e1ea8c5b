#!/usr/bin/env python3
"""Reads the request logs (kvgate bench --requests-out, gzipped) of this
folder's bench.sh runs and prints what BENCHMARKS quotes from them:

  pool.py pooled     every router:policy's runs pooled (TTFT and end-to-end
                     percentiles), with the spread of the runs' own p90/p99
  pool.py inflight   TTFT of requests that found their prefix cached, by how
                     many other requests the engine had in flight when each
                     was sent, over the runs whose front names the worker
  pool.py splits     per run, how evenly the requests in flight were split
                     over the two engines (sampled every 50 ms)

Percentiles interpolate linearly between the two nearest ranks.
"""

import collections
import glob
import gzip
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The runs pooled under each label: every run of that router and policy in
# rv3-rv8, the invocations whose engines were warmed first (rv1 was not;
# rv2 kept one run per policy). rv7 is a different workload (one request at
# a time) and is left out.
POOLS = {
    "kvgate:cache_aware (wait)": ["rv3/kvgate-cache_aware*", "rv4/kvgate-cache_aware*", "rv8/kvgate-cache_aware*"],
    "kvgate:cache_aware (threshold)": ["rv5/kvgate-cache_aware*"],
    "kvgate:vllm_cache_aware": ["rv3/kvgate-vllm_cache_aware*"],
    "kvgate:round_robin": ["rv3/kvgate-round_robin*", "rv4/kvgate-round_robin*", "rv6/kvgate-round_robin*", "rv8/kvgate-round_robin*"],
    "smg:cache_aware": ["rv4/smg-cache_aware*", "rv5/smg-cache_aware*", "rv8/smg-cache_aware*"],
    "smg:round_robin": ["rv4/smg-round_robin*", "rv6/smg-round_robin*", "rv8/smg-round_robin*"],
}


def q(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def runs(pattern):
    for f in sorted(glob.glob(os.path.join(HERE, pattern + ".requests.jsonl.gz"))):
        with gzip.open(f, "rt") as fh:
            yield f, [json.loads(line) for line in fh]


def pooled():
    for label, pats in POOLS.items():
        ttft, e2e, p90s, p99s, n = [], [], [], [], 0
        for pat in pats:
            for _, reqs in runs(pat):
                n += 1
                t = [r["ttft_ms"] for r in reqs if not r.get("error")]
                ttft += t
                e2e += [r["e2e_ms"] for r in reqs if not r.get("error")]
                p90s.append(q(t, 0.9))
                p99s.append(q(t, 0.99))
        print(f"{label:32s} runs {n:2d} requests {len(ttft):5d}  TTFT p50 {q(ttft, .5):5.0f} p90 {q(ttft, .9):5.0f} "
              f"p99 {q(ttft, .99):5.0f} mean {statistics.mean(ttft):4.0f}  e2e p50 {q(e2e, .5):4.0f} p99 {q(e2e, .99):5.0f}  "
              f"runs' p90 {min(p90s):.0f}-{max(p90s):.0f}, p99 {min(p99s):.0f}-{max(p99s):.0f}")


def in_flight(reqs, r, at):
    return sum(1 for o in reqs if o is not r and o["worker"] == r["worker"]
               and o["sent_ms"] <= at < o["sent_ms"] + o["e2e_ms"])


def inflight():
    by = collections.defaultdict(list)
    for _, reqs in runs("rv3/kvgate-*"):
        for r in reqs:
            # Past the opening burst, and cached: what is left is waiting.
            if r["sent_ms"] >= 1000 and r["cached_tokens"] >= 1000:
                by[in_flight(reqs, r, r["sent_ms"])].append(r["ttft_ms"])
    for k in sorted(by):
        v = by[k]
        print(f"{k} others in flight: {len(v):4d} requests, TTFT p50 {q(v, .5):4.0f} ms, p90 {q(v, .9):4.0f} ms")


def splits():
    """Per run: the share of 50 ms samples at which the two engines' counts
    of requests in flight were within one of each other, and at which they
    differed by four or more, then the five commonest splits."""
    for f, reqs in runs("rv[3-8]/kvgate-*"):
        ws = sorted({r["worker"] for r in reqs})
        end = max(r["sent_ms"] + r["e2e_ms"] for r in reqs)
        seen = collections.Counter()
        t = 0.0
        while t < end:
            c = [sum(1 for r in reqs if r["worker"] == w and r["sent_ms"] <= t < r["sent_ms"] + r["e2e_ms"]) for w in ws]
            c += [0] * (2 - len(c))
            seen[tuple(sorted(c))] += 1
            t += 50
        total = sum(seen.values())
        near = sum(n for (a, b), n in seen.items() if b - a <= 1) / total
        far = sum(n for (a, b), n in seen.items() if b - a >= 4) / total
        top = ", ".join(f"{a}/{b} {n / total:.2f}" for (a, b), n in seen.most_common(5))
        print(f"{os.path.relpath(f, HERE):48s} within one {near:.2f}, four or more apart {far:.2f}; {top}")


if __name__ == "__main__":
    {"pooled": pooled, "inflight": inflight, "splits": splits}[sys.argv[1] if len(sys.argv) > 1 else "pooled"]()
