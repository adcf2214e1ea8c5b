#!/usr/bin/env bash
# Attack 3r's clients (128 streams of 120,000 tokens, each read for one
# message and then not for 75 s) against BIN's router over two simulators
# at --time-scale 0, with the router's live heap taken 40 s in (the clients
# stalled, before --stream-send-timeout) and 67 s in (after it). Ports
# 42000-42009.
#
# Usage: scripts/attack/heap-3r.sh BIN OUT   (from the repository root)
set -u
BIN=$1 OUT=$2
mkdir -p "$OUT"
ATK="$OUT/attack"
go build -o "$ATK" ./scripts/attack
"$BIN" sim --port 42001 --time-scale 0 --log-level warn >"$OUT/sim1.log" 2>&1 & s1=$!
"$BIN" sim --port 42002 --time-scale 0 --log-level warn >"$OUT/sim2.log" 2>&1 & s2=$!
sleep 1
"$BIN" serve --port 42000 --worker-urls 127.0.0.1:42001,127.0.0.1:42002 --pprof-addr 127.0.0.1:42008 \
	--prometheus-port 42009 --log-level warn >"$OUT/serve.log" 2>&1 & r=$!
sleep 3
"$ATK" -attack stalled-readers -router 127.0.0.1:42000 -metrics 127.0.0.1:42009 -pid $r -n 128 -hold 75s -tail 5s >"$OUT/attack.txt" 2>&1 & a=$!
sleep 40
curl -s "http://127.0.0.1:42008/debug/pprof/heap?gc=1" >"$OUT/heap40.pb.gz"
sleep 27
curl -s "http://127.0.0.1:42008/debug/pprof/heap?gc=1" >"$OUT/heap67.pb.gz"
wait $a
kill $r $s1 $s2
wait
for h in 40 67; do echo "== ${h} s"; go tool pprof -top -inuse_space "$BIN" "$OUT/heap$h.pb.gz" 2>/dev/null | sed -n '5,14p'; done >"$OUT/top.txt"
