#!/usr/bin/env python3
"""Cuts the parts of the Mooncake traces no setting was tuned on: the
conversation trace's requests 6,001-8,000 and the synthetic trace's last
2,000, each with its timestamps moved to start at 0.

  slices.py OUTDIR
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "testdata", "traces")


def cut(name, start, end, out):
    with open(os.path.join(TRACES, name)) as f:
        rows = [json.loads(line) for line in f.read().splitlines()[start:end]]
    t0 = rows[0]["timestamp"]
    with open(out, "w") as f:
        for r in rows:
            r["timestamp"] -= t0
            f.write(json.dumps(r) + "\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cut("conversation_trace.jsonl", 6000, 8000, os.path.join(out, "conv-6000.jsonl"))
    cut("synthetic_trace.jsonl", 1993, 3993, os.path.join(out, "synth-2000.jsonl"))


if __name__ == "__main__":
    main()
