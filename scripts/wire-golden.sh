#!/usr/bin/env bash
# Records the wire description of the engines' own protocol definitions in
# internal/wire/testdata/engines.golden, which wire_test.go holds kvgate's copies
# (api/proto) to.
#
# Usage: scripts/wire-golden.sh DIR
#   DIR holds the engines' definitions: common.proto, sglang_scheduler.proto and
#   vllm_engine.proto, as published in the PyPI package smg-grpc-proto
#   (smg_grpc_proto/proto/; make proto-parity pins the release, 0.4.28 now).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: scripts/wire-golden.sh DIR-with-upstream-protos}
make -s tools >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/common.proto "$src"/sglang_scheduler.proto "$src"/vllm_engine.proto "$work"/
printf 'version: v2\n' > "$work"/buf.yaml
(cd "$work" && "$OLDPWD"/bin/buf build --as-file-descriptor-set -o -) |
	go run ./internal/wire/dump > internal/wire/testdata/engines.golden
echo "wrote internal/wire/testdata/engines.golden ($(wc -l < internal/wire/testdata/engines.golden) facts)"
