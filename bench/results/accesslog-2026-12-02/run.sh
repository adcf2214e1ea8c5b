#!/bin/sh
# The access log built only when written: the router's CPU per fresh
# 1K-token request, one build ("main") against another ("compared"), with
# the relay floor, the three fronts taking turns in one run.
#   OLD  the build before (d87dac4)
#   NEW  the access log built only when written (c2e4b34)
#   NEW2 the attempt's line without a derived handler (a2b3b88)
# warn.txt: the rig's --log-level warn (no line is written for an OK call).
# info.txt, info-attempt-line.txt: --log-level info (every request writes
# "generate done" and "finished call"; those lines, and the routers'
# start-up lines, are left out of the files: 179,114 in info.txt).
set -eu
NEW=$1 OLD=$2 NEW2=$3
"$NEW" bench --overhead --cpu --prompt-tokens 1024 --router-args=--kv-events=off \
  --compare-binary "$OLD" --cpu-rounds 12 > warn.txt 2>&1
"$NEW" bench --overhead --cpu --prompt-tokens 1024 --router-args='--kv-events=off --log-level=info' \
  --compare-binary "$OLD" --cpu-rounds 10 2>&1 | grep -v '^time=' > info.txt
"$NEW2" bench --overhead --cpu --prompt-tokens 1024 --router-args='--kv-events=off --log-level=info' \
  --compare-binary "$NEW" --cpu-rounds 10 2>&1 | grep -v '^time=' > info-attempt-line.txt
# mirror-on.txt: NEW2 against OLD with the mirror on (the default), 13:09 UTC.
"$NEW2" bench --overhead --cpu --prompt-tokens 1024 --compare-binary "$OLD" --cpu-rounds 10 2>&1 | grep -v '^time=' > mirror-on.txt
# mirror-on-off.txt: NEW2 with the mirror on against itself with it off, 13:08 UTC.
"$NEW2" bench --overhead --cpu --prompt-tokens 1024 --compare-router-args '--kv-events off' --cpu-rounds 10 2>&1 | grep -v '^time=' > mirror-on-off.txt
# mirror-on-off-106a3bf.txt: the same at 106a3bf (the access log without the attempt's line), 12:38 UTC.
