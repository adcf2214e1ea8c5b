#!/usr/bin/env bash
# Encode throughput of kvgate's tokenizer against the Hugging Face reference
# (tokenizers@0.23.2, Node binding), single thread, alternating the two in one
# run so that both see the same machine. Prints the median tokens/s of each
# and their ratio, per tokenizer and document.
#
# Usage: scripts/tokenizers/compare.sh [ROUNDS] [TOKENIZERS]
#   ROUNDS      alternations (default 3)
#   TOKENIZERS  comma-separated (default llama3,qwen3)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
toks=${2:-llama3,qwen3}
make -s testdata >/dev/null
(cd scripts/tokenizers && npm ci --no-audit --no-fund --silent >/dev/null)
go test -c -o /tmp/kvgate-tokenize.test ./tokenize/ >/dev/null
re="^BenchmarkEncode/($(echo "$toks" | tr ',' '|'))/"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
	echo "round $r/$rounds" >&2
	# Go: one goroutine (GOMAXPROCS=1), warm per-word caches as the reference's are warm.
	(cd tokenize && GOMAXPROCS=1 /tmp/kvgate-tokenize.test -test.run '^$' -test.bench "$re" -test.benchtime 2s) |
		awk '/^BenchmarkEncode\//{print "go", $0}' >>"$out"
	(cd scripts/tokenizers && node bench.mjs --tokenizers "$toks" --min-ms 2000) | sed 's/^/ref /' >>"$out"
done
python3 - "$out" <<'PY'
import json, re, statistics, sys
go, ref = {}, {}
for line in open(sys.argv[1]):
    kind, rest = line.split(' ', 1)
    if kind == 'go':
        m = re.match(r'BenchmarkEncode/(\w+)/(\S+?)(?:-\d+)?\s', rest)
        tps = re.search(r'([\d.e+]+) tokens/s', rest)
        if m and tps:
            go.setdefault((m.group(1), m.group(2)), []).append(float(tps.group(1)))
    else:
        d = json.loads(rest)
        ref.setdefault((d['tokenizer'], d['doc']), []).append(d['tokens_per_sec'])
print(f"{'tokenizer':<12}{'doc':<10}{'kvgate tok/s':>14}{'reference tok/s':>17}{'ratio':>8}")
for key in sorted(go):
    doc = key[1] if key[1].startswith('long') else 'long-' + key[1]
    g = statistics.median(go[key]); r = statistics.median(ref.get((key[0], doc), [float('nan')]))
    print(f"{key[0]:<12}{doc:<10}{g:>14,.0f}{r:>17,.0f}{g / r:>7.1f}x")
PY
