#!/usr/bin/env python3
"""Reads this folder's runs (kvgate bench request logs of scripts/realengine/bench.sh,
gzipped) and the two vLLM engines' own per-iteration log lines
(--enable-logging-iteration-details, engine0 = the first worker URL) and prints:

  per run: its TTFT p99, the slowest first token among the requests sent in
  its first second and the engine that gave it (kvgate only: SMG's answers
  name no worker), and how many engine iterations over 500 ms fell in the
  run, per engine;
  then, for every iteration over 1 s in a run, how many iterations the
  other engine ran in that same second and how long they took.

runs.tsv gives each run's end (the request log's write time, UTC); a run
starts its longest request's span (sent + end-to-end) before it. Engine log
times have one-second resolution.
"""

import bisect
import gzip
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r"^(\d\d):(\d\d):(\d\d) Iteration\(\d+\): (.*?), iteration elapsed time: ([\d.]+) ms")


def secs(hms):
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def iterations(i):
    out = []
    with gzip.open(os.path.join(HERE, f"engine{i}-iterations.log.gz"), "rt") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                t = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
                out.append((t, float(m[5]), m[4]))
    return out


def p(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    eng = [iterations(0), iterations(1)]
    times = [[t for t, _, _ in e] for e in eng]
    runs = []
    with open(os.path.join(HERE, "runs.tsv")) as f:
        for line in f:
            name, end = line.split()
            runs.append((name, secs(end)))
    print(f"{'run':44s} {'p99':>6s} {'1st s max':>9s} {'on':>8s} {'iters >500ms e0/e1':>19s}")
    slow = []
    for name, end in runs:
        with gzip.open(os.path.join(HERE, name), "rt") as f:
            rs = [json.loads(l) for l in f]
        start = end - max(r["sent_ms"] + r["e2e_ms"] for r in rs) / 1000
        first = max((r for r in rs if r["sent_ms"] < 1000), key=lambda r: r["ttft_ms"])
        on = "-" if "worker" not in first else "engine0" if first["worker"].endswith(ENGINE0_PORT) else "engine1"
        counts = []
        for i in (0, 1):
            lo = bisect.bisect_left(times[i], int(start))
            hi = bisect.bisect_right(times[i], int(end))
            inrun = eng[i][lo:hi]
            counts.append(sum(1 for _, ms, _ in inrun if ms > 500))
            slow += [(name, i, t, ms, what) for t, ms, what in inrun if ms > 1000]
        p99 = p([r["ttft_ms"] for r in rs], 0.99)
        print(f"{name:44s} {p99:6.0f} {first['ttft_ms']:9.0f} {on:>8s} {counts[0]:>9d}/{counts[1]}")
    print("\niterations over 1 s in a run, and the other engine's in the same second:")
    for name, i, t, ms, what in slow:
        j = 1 - i
        other = sorted(o for _, o, _ in eng[j][bisect.bisect_left(times[j], t):bisect.bisect_right(times[j], t)])
        o = f"{len(other)} iterations, median {p(other, 0.5):.0f} ms, max {other[-1]:.0f} ms" if other else "none"
        print(f"{name.split('/')[0]} engine{i} {t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d} {ms:5.0f} ms ({what}); engine{1 - i}: {o}")


# The first worker's port (bench.sh's ATTACH order), the same in every invocation.
ENGINE0_PORT = ":50601"

if __name__ == "__main__":
    main()
