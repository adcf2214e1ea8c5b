#!/bin/bash
run() { # name bin args...
  local name=$1 bin=$2; shift 2
  { echo "### $name start $(date -u +%H:%M:%SZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; "$bin" "$@" 2>&1 | grep -v 'level=WARN'; echo "### $name end $(date -u +%H:%M:%SZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$name.txt"
}
B="bench --overhead --cpu --prompt-tokens 1024"
while [ ! -f ALLDONE ]; do sleep 2; done
for i in 4 5 6; do
  run main-$i /tmp/kv-main $B --router-args '--kv-events off'
  run readgo-$i /tmp/kv-readgo $B --router-args '--kv-events off'
done
run main0-1 /tmp/kv-main $B --router-args '--kv-events off --request-read-timeout 0'
run readgo0-1 /tmp/kv-readgo $B --router-args '--kv-events off --request-read-timeout 0'
run main0-2 /tmp/kv-main $B --router-args '--kv-events off --request-read-timeout 0'
run readgo0-2 /tmp/kv-readgo $B --router-args '--kv-events off --request-read-timeout 0'
# profile of the router on the branch, tokens case
( until curl -sf -o /dev/null http://127.0.0.1:6061/debug/pprof/; do sleep 0.5; done; sleep 6; curl -sf -o prof-readgo.pb.gz "http://127.0.0.1:6061/debug/pprof/profile?seconds=20"; echo "profile fetched $(date -u +%H:%M:%SZ)" ) > prof.log 2>&1 &
run prof-readgo /tmp/kv-readgo $B --cpu-budget 10s --router-pprof-addr 127.0.0.1:6061 --router-args '--kv-events off'
wait
echo done > ALLDONE2
