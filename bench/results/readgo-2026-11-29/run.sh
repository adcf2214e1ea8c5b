#!/bin/bash
run() { # name bin args...
  local name=$1 bin=$2; shift 2
  { echo "### $name start $(date -u +%H:%M:%SZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; "$bin" "$@" 2>&1 | grep -v 'level=WARN'; echo "### $name end $(date -u +%H:%M:%SZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$name.txt"
}
run readgo-1 /tmp/kv-readgo bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off'
run main-2 /tmp/kv-main bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off'
run readgo-2 /tmp/kv-readgo bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off'
run main-3 /tmp/kv-main bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off'
run readgo-3 /tmp/kv-readgo bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off'
run mainmirror-1 /tmp/kv-main bench --overhead --cpu --prompt-tokens 1024
run readgomirror-1 /tmp/kv-readgo bench --overhead --cpu --prompt-tokens 1024
echo done > ALLDONE
