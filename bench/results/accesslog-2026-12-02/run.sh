#!/bin/sh
# The access log built only when written: the router's CPU per fresh
# 1K-token request, this build ("main") against the build before it
# ("compared", d87dac4), with the relay floor, the three fronts taking
# turns in one run. NEW and OLD are kvgate binaries of the two builds.
# warn.txt: the rig's --log-level warn (no line is written for an OK call);
# info.txt: --log-level info (every request writes "generate done" and
# "finished call"; those, 179,114 lines with the routers' start-up lines, are left out of the file).
set -eu
NEW=$1 OLD=$2
"$NEW" bench --overhead --cpu --prompt-tokens 1024 --router-args=--kv-events=off \
  --compare-binary "$OLD" --cpu-rounds 12 > warn.txt 2>&1
"$NEW" bench --overhead --cpu --prompt-tokens 1024 --router-args='--kv-events=off --log-level=info' \
  --compare-binary "$OLD" --cpu-rounds 10 2>&1 | grep -v '^time=' > info.txt
