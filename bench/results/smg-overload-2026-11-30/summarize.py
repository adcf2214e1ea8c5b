"""Prints one markdown row per speed, round and router from the JSON outputs
(goodput from the text output beside each)."""
import glob
import json
import re

print('| speed | round | router | TTFT p50 ms | p90 | p99 | goodput/s (share) | hit (engines) | load CoV | router CPU s / 1k req |')
print('|---|---|---|---:|---:|---:|---:|---:|---:|---:|')
for path in sorted(glob.glob('speed*-*-first.json')):
    speed, order = re.match(r'speed(\d)-(\w+)-first\.json', path).groups()
    text = open(path.replace('.json', '.txt')).read()
    for r in json.load(open(path))['runs']:
        t = r['ttft_ms']
        m = re.search(r'goodput ' + re.escape(r['policy']) + r': ([\d.]+) requests/s .*\(([\d.]+)%', text)
        good = f'{m.group(1)} ({m.group(2)}%)' if m else '-'
        print(f"| {speed} | {order} first | {r['policy'].split(':')[0]} | {t['p50']:,.0f} | {t['p90']:,.0f} | {t['p99']:,.0f} | {good} | "
              f"{r['router']['engine_cache_hit_rate']:.3f} | {r['load_cov']:.3f} | {r['router']['cpu_s_per_1k_requests']:.1f} |")
