#!/usr/bin/env bash
# Records the wire description of TensorRT-LLM's own protocol definition in
# internal/wire/testdata/trtllm.golden, which trtllm_test.go holds kvgate's copy
# (api/proto/trtllm) to.
#
# Usage: scripts/wire-golden-trtllm.sh [DIR]
#   DIR holds common.proto and trtllm_service.proto as published in the PyPI
#   package smg-grpc-proto (smg_grpc_proto/proto/). Without DIR the pinned
#   release is downloaded with pip into a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
SMG_GRPC_PROTO_VERSION=${SMG_GRPC_PROTO_VERSION:-0.4.28}
make -s tools >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=${1:-}
if [ -z "$src" ]; then
	pip download --quiet --no-deps -d "$work/pkg" "smg-grpc-proto==$SMG_GRPC_PROTO_VERSION"
	python3 -m zipfile -e "$work"/pkg/*.whl "$work/pkg/x"
	src="$work/pkg/x/smg_grpc_proto/proto"
fi
mkdir "$work/in"
cp "$src"/common.proto "$src"/trtllm_service.proto "$work/in"/
printf 'version: v2\n' > "$work/in/buf.yaml"
(cd "$work/in" && "$OLDPWD"/bin/buf build --as-file-descriptor-set -o -) |
	go run ./internal/wire/dump trtllm > internal/wire/testdata/trtllm.golden
echo "wrote internal/wire/testdata/trtllm.golden ($(wc -l < internal/wire/testdata/trtllm.golden) facts)"
