"""Summarises fleet.txt: per policy, fleet size and op, each build's CPU p50
and p99 (µs) by round, and allocated bytes per selection."""
import collections
import re

d = collections.defaultdict(lambda: collections.defaultdict(list))
build = None
for line in open('fleet.txt'):
    m = re.match(r'## round \d, (\w+)', line)
    if m:
        build = m.group(1)
        continue
    m = re.match(r'BenchmarkSelectionByFleetSize/policy=(\S+)/workers=(\d+)/op=(\w+)-2\s+\d+\s+\d+ ns/op\s+(\d+) cpu-p50-ns\s+(\d+) cpu-p99-ns\s+(\d+) p50-ns\s+(\d+) p99-ns\s+(\d+) B/op', line)
    if m:
        key = (m.group(1), int(m.group(2)), m.group(3))
        d[key][build].append((int(m.group(4)), int(m.group(5)), int(m.group(8))))
print('| policy | workers | op | CPU p50 µs old | new | CPU p99 µs old | new | B/op old → new |')
print('|---|---:|---|---|---|---|---|---|')
for key in sorted(d):
    old, new = d[key]['old'], d[key]['new']
    f = lambda xs, i: ', '.join(f'{x[i] / 1000:.1f}' for x in xs)
    print(f'| {key[0]} | {key[1]:,} | {key[2]} | {f(old, 0)} | {f(new, 0)} | {f(old, 1)} | {f(new, 1)} | {old[0][2]:,} → {new[0][2]:,} |')
