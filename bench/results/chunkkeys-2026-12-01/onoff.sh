#!/usr/bin/env bash
# Mirror on ÷ off (issue 25), builds alternating: onoff.sh OUT KVGATE_OLD KVGATE_NEW ROUNDS.
# Each round runs old on, new on, old off, new off; the next starts where this one ended.
set -euo pipefail
out=$1 old=$2 new=$3 rounds=$4
mkdir -p "$out"
order=("old on" "new on" "old off" "new off")
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < 4; i++)); do
		set -- ${order[(i + r) % 4]}
		bin=$old
		[ "$1" = new ] && bin=$new
		echo "## round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $1 $2" >> "$out/$1-$2.txt"
		if [ "$2" = off ]; then
			"$bin" bench --overhead --cpu --prompt-tokens 1024 --router-args '--kv-events off' >> "$out/$1-$2.txt" 2>&1
		else
			"$bin" bench --overhead --cpu --prompt-tokens 1024 >> "$out/$1-$2.txt" 2>&1
		fi
	done
done
