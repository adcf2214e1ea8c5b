#!/usr/bin/env python3
"""Cuts the trace parts the youngHold share was checked on and not chosen
on: the conversation trace's requests 2,001-4,000 and 10,001-12,000 and the
synthetic trace's last 2,000, each with its timestamps moved to start at 0.

  slices.py OUTDIR
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACES = os.path.join(HERE, "..", "..", "testdata", "traces")

PARTS = [
    ("conversation_trace.jsonl", 2000, 4000, "conv-2000.jsonl"),
    ("conversation_trace.jsonl", 10000, 12000, "conv-10000.jsonl"),
    ("synthetic_trace.jsonl", 1993, 3993, "synth-2000.jsonl"),
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, start, end, dst in PARTS:
        with open(os.path.join(TRACES, name)) as f:
            rows = [json.loads(line) for line in f.read().splitlines()[start:end]]
        t0 = rows[0]["timestamp"]
        with open(os.path.join(out, dst), "w") as f:
            for r in rows:
                r["timestamp"] -= t0
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
