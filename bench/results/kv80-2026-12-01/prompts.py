#!/usr/bin/env python3
"""Prompt lengths of the conversation trace's first 1,000 requests: the
mean and median BENCHMARKS.md reads, how many exceed one engine's
80,000-token cache, and the longest. Usage: prompts.py TRACE"""
import json
import sys

lengths = []
with open(sys.argv[1]) as f:
    for line in f:
        lengths.append(json.loads(line)["input_length"])
        if len(lengths) == 1000:
            break
lengths.sort()
print(f"requests {len(lengths)}")
print(f"mean {sum(lengths) / len(lengths):.0f} tokens, median {lengths[len(lengths) // 2]}")
print(f"over 80,000 tokens: {sum(1 for n in lengths if n > 80000)}, longest {lengths[-1]}")
