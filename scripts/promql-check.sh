#!/usr/bin/env bash
# promql-check: runs the PromQL of docs/metrics.md and of the Grafana dashboard
# through a real Prometheus that scrapes a real kvgate.
#
# It starts `kvgate serve` on its embedded default (simulated engines,
# in-process, no delays) on free loopback ports, sends it a little traffic with
# `kvgate bench --target` (the unique workload: text prompts and chats, which
# the embedded engines' small vocabulary accepts), runs Debian's Prometheus
# (installed at the pinned version below when missing and run as root)
# scraping it every second from a temporary directory, and queries
# Prometheus' HTTP API with:
#   - every ```promql block of docs/metrics.md: each must parse; SMG's
#     documented queries (```promql smg: with smg_ replaced by
#     kvgate_) must also return a result;
#     a ```promql finite query must return finite values only (a ratio whose
#     denominator is 0 is +Inf or NaN), and a ```promql quiet alert must
#     return nothing on this lightly loaded router (it must not always fire);
#   - every expr of deploy/grafana/kvgate-dashboard.json, with Grafana's
#     variables replaced ($__rate_interval by 1m, $instance by .*): each must
#     parse.
# Nothing is left running: every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

PROMETHEUS_DEB_VERSION="${PROMETHEUS_DEB_VERSION:-2.42.0+ds-5+deb12u1}"

if ! command -v prometheus >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"prometheus=${PROMETHEUS_DEB_VERSION}" >/dev/null
	else
		echo "promql-check: needs Prometheus: apt-get install prometheus=${PROMETHEUS_DEB_VERSION} (as root)" >&2
		exit 1
	fi
fi
prometheus --version 2>&1 | head -n 1

work="$(mktemp -d)"
pids=()
cleanup() {
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "promql-check: $*" >&2
	for log in "$work"/*.log; do
		[ -f "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
	done
	exit 1
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

go build -o "$work/kvgate" ./cmd/kvgate

grpc_port="$(free_port)"
metrics_port="$(free_port)"
"$work/kvgate" serve --host 127.0.0.1 --port "$grpc_port" --prometheus-host 127.0.0.1 \
	--prometheus-port "$metrics_port" --embedded-time-scale 0 >"$work/kvgate.log" 2>&1 &
pids+=("$!")

prom_port="$(free_port)"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kvgate
    static_configs:
      - targets: ['127.0.0.1:${metrics_port}']
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
	--web.listen-address="127.0.0.1:${prom_port}" >"$work/prometheus.log" 2>&1 &
pids+=("$!")

wait_http() { # url what
	for _ in $(seq 1 120); do
		if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null; then
			return 0
		fi
		sleep 0.5
	done
	fail "$2 did not answer at $1"
}
wait_http "http://127.0.0.1:${metrics_port}/metrics" "kvgate"
wait_http "http://127.0.0.1:${prom_port}/-/ready" "Prometheus"

"$work/kvgate" bench --target "127.0.0.1:${grpc_port}" --workload unique --requests 64 --prompt-bytes 1024 \
	--concurrency 8 >"$work/bench.log" 2>&1 || fail "kvgate bench failed"

python3 - "http://127.0.0.1:${prom_port}" docs/metrics.md deploy/grafana/kvgate-dashboard.json <<'EOF' || fail "queries failed"
import json, math, re, sys, time, urllib.error, urllib.parse, urllib.request

prom, doc_path, dash_path = sys.argv[1:4]

queries = []  # (where, expr, tag): tag is smg, finite, quiet or empty
lines = open(doc_path).read().split("\n")
i = 0
while i < len(lines):
    m = re.match(r"\s*```promql(.*)$", lines[i])
    if m:
        start, body = i + 1, []
        i += 1
        while lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        queries.append((f"{doc_path}:{start}", "\n".join(body), m.group(1).strip()))
    i += 1

def exprs(node, title=""):
    if isinstance(node, dict):
        title = node.get("title", title)
        if isinstance(node.get("expr"), str):
            yield title, node["expr"]
        for v in node.values():
            yield from exprs(v, title)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v, title)

for title, expr in exprs(json.load(open(dash_path))):
    expr = expr.replace("$__rate_interval", "1m").replace("${instance}", ".*").replace("$instance", ".*")
    queries.append((f"dashboard panel {title!r}", expr, ""))

smg = sum(1 for q in queries if q[2] == "smg")
if smg < 2:
    sys.exit(f"{doc_path} has {smg} of SMG's queries, want 2")

def query(expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # 400 for a query that does not parse
        return json.load(e)

# Wait for a few scrapes after the traffic, so that rate() has two samples.
deadline = time.time() + 60
while time.time() < deadline:
    r = query("count_over_time(kvgate_requests_total[5m])")
    if r.get("status") == "success" and any(float(s["value"][1]) >= 3 for s in r["data"]["result"]):
        break
    time.sleep(1)
else:
    sys.exit("Prometheus did not scrape kvgate's requests three times within 60 s")

failed = 0
for where, expr, tag in queries:
    r = query(expr)
    if r.get("status") != "success":
        print(f"FAIL {where}: {r.get('errorType')}: {r.get('error')}\n  {expr}")
        failed += 1
        continue
    vector = r["data"]["resultType"] in ("vector", "matrix")
    n = len(r["data"]["result"]) if vector else 1
    problem = ""
    if tag in ("smg", "finite") and n == 0:
        problem = f"the {tag} query returned nothing"
    elif tag == "finite" and vector:
        bad = [s["value"][1] for s in r["data"]["result"] if not math.isfinite(float(s["value"][1]))]
        if bad:
            problem = f"values {bad} are not finite (a denominator is 0)"
    elif tag == "quiet" and n:
        problem = f"the alert fires on a lightly loaded router: {r['data']['result']}"
    if problem:
        print(f"FAIL {where}: {problem}\n  {expr}")
        failed += 1
        continue
    print(f"ok   {where}: {n} series" + (f" ({tag})" if tag else ""))
print(f"promql-check: {len(queries) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
