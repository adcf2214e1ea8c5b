#!/usr/bin/env python3
"""Reads the decision logs diagnostic.patch writes (one JSON line per observed
request: the chosen engine's last load poll, the match, the prediction and
what the engine reported) and counts the prediction misses by what the
decision saw. usage: misses.py diag/*.jsonl.gz"""
import gzip, json, sys

for fn in sys.argv[1:]:
    rs = [json.loads(l) for l in gzip.open(fn, 'rt')]
    under = [r for r in rs if r['Reported'] < r['Predicted']]
    over = [r for r in rs if r['Reported'] > r['Predicted']]
    queued = [r for r in under if r['Waiting'] > 0]
    whole = [r for r in queued if r['Predicted'] == r['Matched']]
    print(f"{fn}: {len(rs)} observed, {len(under) + len(over)} missed: "
          f"{len(under)} under the prediction ({len(queued)} decided on an engine whose poll showed a queue, "
          f"{len(whole)} of them predicted the whole match because a request in flight shared it), "
          f"{len(over)} over it")
