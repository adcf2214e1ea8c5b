#!/usr/bin/env bash
# The indexer benchmark's lookups before and after a tree node indexes its
# children by key once it has more than 128 (cd50e6a), the two builds
# taking turns: the first page's run script, with the build before the
# change as its base.
#
# usage: bench/results/widenode-lookup-2026-12-04/run.sh [rounds] [base rev]   (from the repo root)
set -euo pipefail
exec "$(dirname "$0")/../firstpage-2026-12-01/run.sh" "${1:-4}" "${2:-8bbc71f}"
