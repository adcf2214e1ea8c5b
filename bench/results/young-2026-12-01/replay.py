#!/usr/bin/env python3
"""Replays the diagnostic logs in diag/ under other rules for which requests
in flight on an engine queueing for KV hold their pages when it admits the
next, and prints each rule's misses (predictions off the engine's report).

Routing does not depend on the prediction, so one run's log serves every
rule. Each line of a log is one decision: the chosen engine's last poll
(Waiting, Running, MaxRunning, Max), its mean request duration in seconds
(Mean, 0 until one ended), the match, the prediction the build made, the
engine's report, and, when the poll showed a queue, the requests in flight
there newest first (InFlight of them) as Steps: [rank, age in seconds, the
longest share among the newest rank+1], one step wherever the share grows.

  replay.py diag/*.jsonl.gz

After the rules it prints, per log, how long before the decision (in mean
request durations) the older requests had been placed, those beyond the
newest count that shared more than the logged prediction, split by whether
the engine still held what they shared.
"""

import gzip
import json
import statistics
import sys


def queueing(r):
    """The engine queues for KV: requests wait below its running limit."""
    return r["Waiting"] > 0 and (r["MaxRunning"] == 0 or r["Max"] == 0 or r["Running"] < r["MaxRunning"])


def predict(r, counts):
    """The longest share among the requests counts(r, rank, age) keeps."""
    best = 0
    for rank, age, share in r.get("Steps", []):
        if counts(r, rank, age):
            best = share
    return min(best, r["Matched"])


def newest(r, rank, age):
    return rank < r["Running"]


def young(alpha):
    def counts(r, rank, age):
        return newest(r, rank, age) or (r["Mean"] > 0 and age < alpha * r["Mean"])
    return counts


def drained(c):
    """The queue ahead drains as requests in flight end, about InFlight per
    mean request: a request counts if it will not have run a mean request
    by the time c times that wait is over."""
    def counts(r, rank, age):
        wait = c * r["Waiting"] * r["Mean"] / max(r.get("InFlight", 1), 1)
        return newest(r, rank, age) or (r["Mean"] > 0 and age < r["Mean"] - wait)
    return counts


RULES = [("logged", None), ("newest", newest)]
RULES += [("young %.2f" % a, young(a)) for a in (0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 1.0)]
RULES += [("drained %.2f" % c, drained(c)) for c in (0.5, 0.75, 1.0)]


def misses(rows, counts):
    n = 0
    for r in rows:
        if counts is None or not (queueing(r) and r["Matched"] > 0):
            p = r["Predicted"]
        else:
            p = predict(r, counts)
        n += p != r["Reported"]
    return n


def older_ages(rows):
    """The ages (in mean durations) of older sharing requests, held and gone."""
    held, gone = [], []
    for r in rows:
        if not (queueing(r) and r["Matched"] > 0) or r["Mean"] <= 0:
            continue
        for rank, age, share in r.get("Steps", []):
            share = min(share, r["Matched"])
            if rank >= r["Running"] and share > r["Predicted"]:
                (held if r["Reported"] >= share else gone).append(age / r["Mean"])
    return held, gone


def main():
    logs = []
    for path in sys.argv[1:]:
        with gzip.open(path, "rt") as f:
            logs.append((path.split("/")[-1].removesuffix(".jsonl.gz"), [json.loads(line) for line in f]))
    heads = ["%s (%d)" % (n, len(rows)) for n, rows in logs]
    w = max(len(h) for h in heads) + 2
    print("misses per log (its requests in brackets), by rule")
    print("%-14s" % "rule" + "".join(h.rjust(w) for h in heads))
    for name, counts in RULES:
        print("%-14s" % name + "".join(str(misses(rows, counts)).rjust(w) for _, rows in logs))
    print()
    print("older requests sharing more than the prediction: how many, and the median of how long before")
    print("the decision they were placed, in mean request durations, by whether the engine still held it")
    for n, rows in logs:
        held, gone = older_ages(rows)
        med = lambda xs: "%.2f" % statistics.median(xs) if xs else "-"
        print("%-28s held %4d, median %s; evicted %4d, median %s" % (n, len(held), med(held), len(gone), med(gone)))


if __name__ == "__main__":
    main()
