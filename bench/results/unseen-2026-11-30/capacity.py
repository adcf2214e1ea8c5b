#!/usr/bin/env python3
"""How loaded a replay keeps the simulated fleet: the prefill it asks for
per second against the fleet's prefill rate, and the decode it asks for in
slot-seconds per second against the fleet's slots.

Prefill is counted twice: as if every prompt were prefilled whole, and as if
credited with everything an unlimited cache shared by every engine would
hold for it (the oracle's match, 512 tokens a block). The simulator's rates
(`workers/sim/config.go`): 20,000 prefill tokens a second an engine, about
8.4 ms a decode step at the runs' batches (the tables' ITL p50), 8 slots an
engine.

  capacity.py TRACE SPEED [REQUESTS] [ENGINES]
"""

import json
import sys

BLOCK, RATE, STEP, SLOTS = 512, 20000.0, 0.0084, 8


def main():
    path, speed = sys.argv[1], float(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    engines = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    with open(path) as f:
        rows = [json.loads(line) for line, _ in zip(f, range(n))]
    seen, whole, credited, decode = set(), 0, 0, 0.0
    for r in rows:
        key, matched = (), 0
        for h in r["hash_ids"]:
            key += (h,)
            if key not in seen:
                break
            matched += 1
        key = ()
        for h in r["hash_ids"]:
            key += (h,)
            seen.add(key)
        whole += r["input_length"]
        credited += max(0, r["input_length"] - BLOCK * matched)
        decode += r["output_length"] * STEP
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1000 / speed
    cap = engines * RATE
    print(f"{path} at speed {speed:g}, {len(rows)} requests over {span:,.0f} s, {engines} engines:")
    print(f"  prefill asked: whole prompts {whole / span / 1000:,.0f}K tokens/s, with the oracle's matches "
          f"{credited / span / 1000:,.0f}K, against the fleet's {cap / 1000:,.0f}K "
          f"({whole / span / cap:.0%} and {credited / span / cap:.0%})")
    print(f"  decode asked: {decode / span:.1f} slot-seconds a second against {engines * SLOTS} slots")


if __name__ == "__main__":
    main()
