#!/usr/bin/env python3
"""Replays the predictions of a decision log (diagnostic.patch, with each
decision's shares by rank among the requests in flight) under other counts of
the requests that hold a KV-queueing engine's pages, and prints each count's
exactness. usage: cutoffs.py LOG.jsonl[.gz]..."""
import gzip, json, sys

def rows(fn):
    op = gzip.open if fn.endswith('.gz') else open
    return [json.loads(l) for l in op(fn, 'rt')]

def share(r, k):
    best = 0
    for rank, n in (r.get('Steps') or []):
        if rank < k:
            best = n
    return best

rules = {
    'every request in flight': lambda r: 1 << 30,
    'newest Running': lambda r: r['Running'],
    'newest Running+Waiting': lambda r: r['Running'] + r['Waiting'],
    'newest 2*Running': lambda r: 2 * r['Running'],
    'newest 3/2 Running': lambda r: r['Running'] * 3 // 2,
    'newest 3/4 Running': lambda r: r['Running'] * 3 // 4,
    'newest Running/2': lambda r: r['Running'] // 2,
    'all but the oldest Waiting': lambda r: r['NFlight'] - r['Waiting'],
}
for fn in sys.argv[1:]:
    rs = rows(fn)
    # below the running limit: every engine in these runs has 256 slots (MaxRunning is not logged)
    kvq = lambda r: r["Waiting"] > 0 and r["Matched"] > 0 and r["Running"] < 256
    print(fn, len(rs), 'observed,', sum(map(kvq, rs)), 'on an engine queueing for KV')
    for name, k in rules.items():
        miss = sum((min(share(r, k(r)), r['Matched']) if kvq(r) else r['Predicted']) != r['Reported'] for r in rs)
        print(f"  {name:28s} misses {miss:4d}  exact {1 - miss / len(rs):.3f}")
