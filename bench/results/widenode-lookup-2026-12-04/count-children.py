"""Counts the widest fan-out of each Mooncake trace's hash-id prefixes: the
distinct first blocks (the root's children) and, below each prefix, the
distinct next blocks. usage: python3 count-children.py (from the repo root)"""
import collections
import json

for trace in ("conversation", "synthetic"):
    kids = collections.defaultdict(set)
    with open(f"bench/testdata/traces/{trace}_trace.jsonl") as f:
        for line in f:
            ids = json.loads(line)["hash_ids"]
            for i in range(len(ids)):
                kids[tuple(ids[:i])].add(ids[i])
    widest = max(kids.items(), key=lambda kv: len(kv[1]))
    print(f"{trace}: root {len(kids[()])} children; widest node {len(widest[1])} children, below {len(widest[0])} blocks")
