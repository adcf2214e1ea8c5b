#!/usr/bin/env python3
"""Reads the request logs (kvgate bench --requests-out, gzipped) of this
folder's bench.sh runs and prints what BENCHMARKS quotes from them:

  pool.py pooled     each router:policy's runs pooled (TTFT and end-to-end
                     percentiles), with the spread of the runs' own p90/p99
  pool.py splits     the share of time the two engines' counts of requests in
                     flight were within one of each other, and four or more
                     apart, over each pool's runs (sampled every 50 ms; kvgate
                     runs only: SMG's answers do not name the worker)
  pool.py slow       per pool, the requests that found their prefix cached and
                     still waited over 500 ms for their first token, by how
                     many others their engine had in flight when each was sent
  pool.py cpu        per run, the engines' CPU seconds (bench.sh's NAME.cpu)
                     over the run's wall time, first request to last answer
  pool.py late       as pooled, but only the requests sent past each run's
                     first second (and, for comparison, all of them): the
                     runs' first eight requests are sent at once, and the
                     seconds some of them wait decide the pooled p99; with
                     run4's pools (the mirror on and off) besides
  pool.py steps      from every kvgate run here: by how many other requests
                     its engine had in flight when each was sent, its time per
                     output token after the first, and the TTFT of those that
                     found their prefix cached (past each run's first second)

Percentiles interpolate linearly between the two nearest ranks. This
script repeats ../step-2026-11-30/pool.py's helpers so that the folder
reproduces its figures alone.
"""

import collections
import glob
import gzip
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# run1: kvgate is the first build with the step priced (weight 1.5, then its
# default), kvgate+nostep the same build with 0. run2: kvgate+step is the
# build with the step and what a request slows priced (weight 1.5),
# kvgate the same build with its default, 0; run3 the same, kvgate first.
# The build at weight 1.5 (the new default) and at 0 (the old default), by
# invocation: run1 and run2 ran a build whose default was 0, with 1.5 as
# kvgate+step; run3 the build whose default is 1.5, with 0 as kvgate+s0.
NEW = {"run1": "kvgate+step", "run2": "kvgate+step", "run3": "kvgate"}
OLD = {"run1": "kvgate", "run2": "kvgate", "run3": "kvgate+s0"}
POOLS = {}
# run4: the build at 51739b2 (default 1.5) with its KV event mirror on
# (kvgate) and off (kvgate+off), to see whether subscribing to the engines'
# events is what makes some runs' first second slow; `late` reads it.
RUN4 = {
    "run4 kvgate cache_aware 1.5, mirror on": ["run4/kvgate-cache_aware*"],
    "run4 kvgate cache_aware 1.5, mirror off": ["run4/kvgate+off-cache_aware*"],
    "run4 kvgate round_robin": ["run4/kvgate-round_robin*", "run4/kvgate+off-round_robin*"],
}
for runs_ in (["run1"], ["run2"], ["run3"], ["run1", "run2"], ["run1", "run2", "run3"]):
    name = "+".join(runs_)
    POOLS.update({
        f"{name} kvgate cache_aware 1.5": [f"{r}/{NEW[r]}-cache_aware*" for r in runs_],
        f"{name} kvgate cache_aware 0": [f"{r}/{OLD[r]}-cache_aware*" for r in runs_],
        f"{name} kvgate round_robin": [f"{r}/{k}-round_robin*" for r in runs_ for k in (NEW[r], OLD[r])],
        f"{name} smg cache_aware": [f"{r}/smg-cache_aware*" for r in runs_],
        f"{name} smg round_robin": [f"{r}/smg-round_robin*" for r in runs_],
    })


def q(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def runs(pattern, base=HERE):
    for f in sorted(glob.glob(os.path.join(base, pattern + ".requests.jsonl.gz"))):
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
        if not ttft:
            continue
        print(f"{label:38s} runs {n:2d} requests {len(ttft):5d}  TTFT p50 {q(ttft, .5):5.0f} p90 {q(ttft, .9):5.0f} "
              f"p99 {q(ttft, .99):5.0f} mean {statistics.mean(ttft):4.0f}  e2e p50 {q(e2e, .5):4.0f} p99 {q(e2e, .99):5.0f}  "
              f"runs' p90 {min(p90s):.0f}-{max(p90s):.0f}, p99 {min(p99s):.0f}-{max(p99s):.0f}")


def late():
    for label, pats in {**POOLS, **RUN4}.items():
        logs = [reqs for pat in pats for _, reqs in runs(pat)]
        if not logs:
            continue
        # Each request with the time it was sent after its run's first.
        sent = []
        for reqs in logs:
            t0 = min(r["sent_ms"] for r in reqs)
            sent.append([(r["sent_ms"] - t0, r) for r in reqs])
        for cut in (0, 1000):
            ttft = [r["ttft_ms"] for log in sent for at, r in log if not r.get("error") and at >= cut]
            print(f"{label:38s} sent from {cut:4d} ms: requests {len(ttft):5d}  TTFT p50 {q(ttft, .5):5.0f} "
                  f"p90 {q(ttft, .9):5.0f} p99 {q(ttft, .99):5.0f} mean {statistics.mean(ttft):4.0f}")
        slow = sum(any(r["ttft_ms"] > 1000 for at, r in log if at < 1000) for log in sent)
        print(f"{label:38s} runs whose first second had a TTFT over 1 s: {slow} of {len(logs)}")


def in_flight(reqs, r, at):
    return sum(1 for o in reqs if o is not r and o["worker"] == r["worker"]
               and o["sent_ms"] <= at < o["sent_ms"] + o["e2e_ms"])


def splits():
    for label, pats in POOLS.items():
        seen = collections.Counter()
        for pat in pats:
            for _, reqs in runs(pat):
                if any("worker" not in r for r in reqs):
                    continue
                ws = sorted({r["worker"] for r in reqs})
                end = max(r["sent_ms"] + r["e2e_ms"] for r in reqs)
                t = 0.0
                while t < end:
                    c = [sum(1 for r in reqs if r["worker"] == w and r["sent_ms"] <= t < r["sent_ms"] + r["e2e_ms"]) for w in ws]
                    c += [0] * (2 - len(c))
                    seen[tuple(sorted(c))] += 1
                    t += 50
        total = sum(seen.values())
        if not total:
            continue
        near = sum(n for (a, b), n in seen.items() if b - a <= 1) / total
        far = sum(n for (a, b), n in seen.items() if b - a >= 4) / total
        top = ", ".join(f"{a}/{b} {n / total:.2f}" for (a, b), n in seen.most_common(5))
        print(f"{label:38s} within one {near:.2f}, four or more apart {far:.2f}; {top}")


def steps():
    per_token, cached = collections.defaultdict(list), collections.defaultdict(list)
    pats = [(HERE, "run*/kvgate*")]
    for base, pat in pats:
        for _, reqs in runs(pat, base):
            for r in reqs:
                if r.get("error") or "worker" not in r:
                    continue
                n = in_flight(reqs, r, r["sent_ms"])
                per_token[n].append((r["e2e_ms"] - r["ttft_ms"]) / 15)
                if r["sent_ms"] >= 1000 and r["cached_tokens"] >= 1000:
                    cached[n].append(r["ttft_ms"])
    for n in sorted(per_token):
        if len(per_token[n]) < 20:
            continue
        c = cached[n]
        print(f"{n} others in flight: {len(per_token[n]):4d} requests, ms per token after the first p50 "
              f"{q(per_token[n], .5):3.0f}; cached TTFT p50 {q(c, .5) if c else float('nan'):4.0f} ({len(c)})")


def slow():
    for label, pats in POOLS.items():
        by, n = collections.Counter(), 0
        for pat in pats:
            for _, reqs in runs(pat):
                for r in reqs:
                    if r.get("error") or r.get("cached_tokens", 0) < 1000 or "worker" not in r:
                        continue
                    n += 1
                    if r["ttft_ms"] > 500:
                        by[in_flight(reqs, r, r["sent_ms"])] += 1
        total = sum(by.values())
        if n:
            dist = ", ".join(f"{k}: {by[k]}" for k in sorted(by))
            print(f"{label:38s} {total} of {n} cached requests over 500 ms; others in flight at their send: {dist}")


def cpu():
    for label, pats in POOLS.items():
        for pat in pats:
            for f, reqs in runs(pat):
                wall = (max(r["sent_ms"] + r["e2e_ms"] for r in reqs) - min(r["sent_ms"] for r in reqs)) / 1000
                with open(f.replace(".requests.jsonl.gz", ".cpu")) as fh:
                    engines = float(fh.read().split("engines ")[1])
                print(f"{os.path.relpath(f, HERE):56s} engines {engines:5.1f} CPU s over {wall:5.1f} s: {engines / wall:.2f} cores")


if __name__ == "__main__":
    {"pooled": pooled, "late": late, "splits": splits, "steps": steps, "slow": slow, "cpu": cpu}[sys.argv[1] if len(sys.argv) > 1 else "pooled"]()
