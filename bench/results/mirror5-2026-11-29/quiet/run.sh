#!/bin/bash
cd /tmp
for spec in "b0 on" "m5 on" "b0 off" "m5 off" "m5 on" "b0 on" "m5 off" "b0 off"; do
  set -- $spec
  args=""; [ $2 = off ] && args="--router-args=--kv-events off"
  echo "=== $1 mirror $2 $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  if [ $2 = off ]; then /tmp/kv-$1 bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off' 2>/dev/null | grep -E "^ +(tokens|relay-floor) "
  else /tmp/kv-$1 bench --overhead --cpu --prompt-tokens 1024 2>/dev/null | grep -E "^ +(tokens|relay-floor) "; fi
done
