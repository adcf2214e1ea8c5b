#!/usr/bin/env python3
"""Which rule tells, at the decision, whether an engine at its running limit
will evict a request's match while the request waits in its queue.

Input: pairs of files from a build with features.patch applied (against
a7e3650), run as

  KVG_HACK_LOG=F.jsonl KVG_DEBUG_LOG=D.jsonl kvgate bench --workload trace ... --policies cache_aware

F.jsonl has one line per decision (the chosen engine's last load poll, the
match, what a request in flight there shares, and `age`: seconds since the
latest request whose prompt held the match ended there); D.jsonl is the
router's and the simulated engines' debug log, whose `admitted` lines give
what the engine had cached at the request's arrival and at its admission,
and `ended` lines when each request ended.

  fit.py F1.jsonl D1.jsonl [F2.jsonl D2.jsonl ...]

For each rule "predict only what a request in flight shares when
since + a * ahead > b * free", where since is the prefill charged to the
engine after the match's last use, ahead the prefill of the requests
queued ahead (key: the newest in flight beyond the limit, `newest` counting
whole prompts, `aheadc` their prefill; `aheadw` the Waiting newest), and
free the KV its running requests leave, it prints how many misses the rule
removes against the build's own predictions, per run, among decisions on
engines at their limit with a queue whose match is longer than what a
request in flight shares.
"""

import collections
import datetime
import json
import sys


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def load(ff, fd):
    feat, adm, end = {}, {}, {}
    for line in open(ff):
        d = json.loads(line)
        feat[d["id"]] = d
    for line in open(fd):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        rid = d.get("request_id", "").split(".")[0]  # an attempt's id is the request's, a dot and a suffix
        if d["msg"] == "admitted":
            adm[rid] = d
        elif d["msg"] == "ended":
            end[rid] = d
    byurl = collections.defaultdict(list)
    for f in feat.values():
        f["end"] = ts(end[f["id"]]["time"]) if f["id"] in end else float("inf")
        byurl[f["url"]].append(f)
    for fs in byurl.values():
        fs.sort(key=lambda f: f["t"])
    rows = []
    for f in feat.values():
        a = adm.get(f["id"])
        if not a:
            continue
        f["rep"], f["arr"] = a["cached_tokens"], a["cached_at_arrival"]
        on = byurl[f["url"]]
        f["since"] = sum(g["plen"] - g["matched"] for g in on if f["t"] - f["age"] < g["t"] < f["t"]) if f["age"] >= 0 else -1
        infl = [g for g in on if g["t"] < f["t"] and g["end"] > f["t"]]
        k = max(0, len(infl) - f["maxrun"])
        f["aheadc"] = sum(g["plen"] - g["pred"] for g in infl[len(infl) - k:]) if k else 0
        f["aheadw"] = sum(g["plen"] - g["pred"] for g in infl[len(infl) - f["waiting"]:]) if f["waiting"] else 0
        rows.append(f)
    return [r for r in rows if r["maxrun"] and r["running"] >= r["maxrun"] and r["waiting"] > 0 and r["matched"] > r["shared"]]


def gain(rows, key, a, b, use_since=True):
    g = 0
    for r in rows:
        if use_since and r["since"] < 0:
            continue  # the match's last use not known: the build's own rule stays
        since = r["since"] if use_since else 0
        new = r["shared"] if since + a * r[key] > b * (r["max"] - r["used"]) else r["matched"]
        g += (r["pred"] != r["rep"]) - (new != r["rep"])
    return g


def main():
    runs = [load(sys.argv[i], sys.argv[i + 1]) for i in range(1, len(sys.argv), 2)]
    for rows in runs:
        lost = [r for r in rows if r["rep"] < r["arr"]]
        print(f"decisions at the limit: {len(rows)}, match lost in the queue: {len(lost)} "
              f"(to what a request in flight shares: {sum(r['rep'] == r['shared'] for r in lost)}), "
              f"the build's misses there: {sum(r['pred'] != r['rep'] for r in rows)}")
    for use_since in (True, False):
        print("since + a*ahead > b*free" if use_since else "a*ahead > b*free (no since)")
        for key in ("newest", "aheadc", "aheadw"):
            for a in (0.5, 1, 1.5, 2):
                for b in (0.6, 0.8, 1.0, 1.2):
                    gs = [gain(rows, key, a, b, use_since) for rows in runs]
                    print(f"  {key} a={a} b={b}: misses removed {gs}, total {sum(gs)}")


if __name__ == "__main__":
    main()
