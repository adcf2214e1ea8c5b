#!/bin/bash
# 8 simulated engines of 8 slots, kvgate serve (new default) in front, the
# conversation trace at --speed 5 for its first 800 requests; then the
# learned step gauges.
set -u
cd /work/main
out=/tmp/sweep/learned; mkdir -p $out
pids=(); urls=()
for i in $(seq 0 7); do
  p=$((47100+i))
  /tmp/kv-main sim --port $p --max-running 8 --vocab-size 128256 --tokenizer-path none > $out/sim$i.log 2>&1 & pids+=($!)
  urls+=("grpc://127.0.0.1:$p")
done
sleep 2
/tmp/kv-main serve --host 127.0.0.1 --port 47200 --prometheus-port 47201 --worker-urls "$(IFS=,; echo "${urls[*]}")" --wait-for-workers --log-level warn > $out/serve.log 2>&1 & pids+=($!)
sleep 3
/tmp/kv-main bench --target 127.0.0.1:47200 --workload trace --trace bench/testdata/traces/conversation_trace.jsonl --speed 5 --requests 800 --slo-ttft 2s > $out/bench.txt 2>&1
curl -s http://127.0.0.1:47201/metrics | grep -E "^kvgate_worker_(decode|prefill|request_duration)" > $out/gauges.txt
kill "${pids[@]}" 2>/dev/null
