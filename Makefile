# kvgate build, code generation and checks.
#
# Tools are installed into ./bin at pinned versions, so `make proto` produces the
# same bytes on every machine.

BUF_VERSION          := v1.75.0
PROTOC_GEN_GO        := v1.36.12
PROTOC_GEN_GO_GRPC   := v1.6.0

# The SDK generators. protoc-gen-es is pinned in sdk/typescript/package.json
# (with its lockfile); the Python SDK's is grpcio-tools from PyPI (its bundled
# protoc), pinned in sdk/python/tools/requirements.txt and installed into a
# virtual environment under KVGATE_CACHE, outside the clone. SDK_PYTHON makes
# that environment and the Python SDK's test environments; SDK_PYTHON_FLOOR
# makes the one that tests the oldest grpcio and protobuf supported (CI may
# give it the oldest Python supported, 3.10).
KVGATE_CACHE     ?= $(HOME)/.cache/kvgate
SDK_PYTHON       ?= python3
SDK_PYTHON_FLOOR ?= $(SDK_PYTHON)
SDK_GEN_REQS     := sdk/python/tools/requirements.txt
SDK_GEN_VENV     := $(KVGATE_CACHE)/sdk-gen-venv
SDK_GEN_STAMP    := $(SDK_GEN_VENV)/.stamp-$(shell sha256sum $(SDK_GEN_REQS) 2>/dev/null | cut -c1-16)

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

.PHONY: all build test check proto tools lint vet fmt-check clean testdata golden golden-check bench chaos fuzz-short \
	sdk sdk-tools sdk-test sdk-install-test

all: build

build:
	go build ./...
	go build -buildvcs=auto -o $(BIN)/kvgate ./cmd/kvgate

## test: the whole test suite with the race detector.
test: testdata
	go test -race -count=1 ./...

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC)

## proto: regenerate api/gen from api/proto.
proto: tools
	rm -rf api/gen
	$(BIN)/buf generate


## sdk-tools: protoc-gen-es and the TypeScript SDK's dependencies (npm ci), and grpcio-tools (pinned,
## from PyPI) in a virtual environment under KVGATE_CACHE, rebuilt when its requirements change.
sdk-tools: sdk/typescript/node_modules/.package-lock.json $(SDK_GEN_STAMP)

sdk/typescript/node_modules/.package-lock.json: sdk/typescript/package-lock.json
	cd sdk/typescript && npm ci --no-audit --no-fund --ignore-scripts

$(SDK_GEN_STAMP): | $(SDK_GEN_REQS)
	rm -rf $(SDK_GEN_VENV)
	$(SDK_PYTHON) -m venv $(SDK_GEN_VENV)
	$(SDK_GEN_VENV)/bin/pip install --quiet --disable-pip-version-check -r $(SDK_GEN_REQS)
	touch $@

## sdk: regenerate the TypeScript and Python SDKs (sdk/*/) from api/proto/kvgate/v1 with buf; the
## Python plugin (sdk/python/tools/protoc-gen-kvgate-python) runs on the generator venv's python.
sdk: tools sdk-tools
	$(BIN)/buf generate --template buf.gen.typescript.yaml --path api/proto/kvgate/v1
	PATH="$(SDK_GEN_VENV)/bin:$$PATH" $(BIN)/buf generate --template buf.gen.python.yaml --path api/proto/kvgate/v1

## sdk-test: each SDK's test against a live kvgate (the embedded default) started from bin/kvgate:
## TypeScript in sdk/typescript (npm test); Python in fresh virtual environments under KVGATE_CACHE
## from `pip install sdk/python`, the wheel and the sdist, at both ends of the grpcio/protobuf range
## (sdk/python/scripts/install-test.sh).
sdk-test: sdk/typescript/node_modules/.package-lock.json
	go build -buildvcs=auto -o $(BIN)/kvgate ./cmd/kvgate
	cd sdk/typescript && KVGATE_BIN=$(BIN)/kvgate npm test
	KVGATE_BIN=$(BIN)/kvgate KVGATE_CACHE=$(KVGATE_CACHE) PYTHON=$(SDK_PYTHON) PYTHON_FLOOR=$(SDK_PYTHON_FLOOR) \
		sdk/python/scripts/install-test.sh

## sdk-install-test: @kvgate/sdk installed into fresh projects from its packed tarball, by path and
## from a git URL (npm builds it on pack/prepare), its README example compiled with tsc --strict
## against each and run against a live kvgate (sdk/typescript/scripts/install-test.sh).
sdk-install-test:
	go build -buildvcs=auto -o $(BIN)/kvgate ./cmd/kvgate
	KVGATE_BIN=$(BIN)/kvgate sdk/typescript/scripts/install-test.sh

## lint: buf lint on the public API.
lint: tools
	$(BIN)/buf lint

vet:
	go vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## check: generated code (api/gen and the SDKs) is current, protos lint clean, code formatted and vetted.
check: proto sdk lint fmt-check vet
	@if [ -n "$$(git status --porcelain -- api/gen sdk)" ]; then \
		echo "api/gen or sdk/ differs from what 'make proto' and 'make sdk' produce:"; \
		git status --porcelain -- api/gen sdk; exit 1; fi
	@echo "check: ok"

clean:
	rm -rf $(BIN)

## testdata: fetch the real tokenizers (pinned, checksummed; three built from real vocabularies) and the
## tiktoken rank files into tokenize/testdata/tokenizers/ (git-ignored); golden: regenerate
## tokenize/testdata/golden/ from Hugging Face tokenizers' Node binding and npm tiktoken; golden-check:
## regenerate into a temp dir and fail if it differs from the committed files.
testdata:
	scripts/tokenizers/fetch.sh

golden: testdata
	cd scripts/tokenizers && npm ci --no-audit --no-fund && node golden.mjs

golden-check: testdata
	cd scripts/tokenizers && npm ci --no-audit --no-fund && node golden.mjs --check

## bench: the policy comparison BENCHMARKS.md reports, against simulated engines
## (an 8B model on one H100) in-process: bench/results/*.json, one SVG chart per
## workload, and the router overhead. About 25 minutes on 2 cores, most of it the
## whole synthetic trace (4 policies x ~4.5 minutes).
BENCH_RESULTS  := bench/results
BENCH_TRACE    ?= bench/testdata/traces/synthetic_trace.jsonl
BENCH_POLICIES := cache_aware,cache_aware:threshold:smallest_tree,prefix_hash,power_of_two,round_robin,random
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench:
	mkdir -p $(BENCH_RESULTS)
	go build -buildvcs=auto -o $(BIN)/kvgate ./cmd/kvgate
	$(BIN)/kvgate bench --workload shared-prefix --qps 4 --requests 128 --policies round_robin,cache_aware \
		--json $(BENCH_RESULTS)/shared-prefix-unloaded.json | tee $(BENCH_RESULTS)/shared-prefix-unloaded.txt
	$(BIN)/kvgate bench --workload shared-prefix --qps 160 --policies $(BENCH_POLICIES) \
		--json $(BENCH_RESULTS)/shared-prefix.json --plot $(BENCH_RESULTS)/shared-prefix.svg | tee $(BENCH_RESULTS)/shared-prefix.txt
	$(BIN)/kvgate bench --workload multiturn --users 64 --qps 2 --policies round_robin,cache_aware \
		--json $(BENCH_RESULTS)/multiturn-unloaded.json | tee $(BENCH_RESULTS)/multiturn-unloaded.txt
	$(BIN)/kvgate bench --workload multiturn --users 256 --policies $(BENCH_POLICIES) \
		--json $(BENCH_RESULTS)/multiturn.json --plot $(BENCH_RESULTS)/multiturn.svg | tee $(BENCH_RESULTS)/multiturn.txt
	$(BIN)/kvgate bench --workload trace --trace $(BENCH_TRACE) --speed 3 \
		--policies cache_aware,prefix_hash,power_of_two,round_robin \
		--json $(BENCH_RESULTS)/trace.json --plot $(BENCH_RESULTS)/trace.svg | tee $(BENCH_RESULTS)/trace.txt
	$(BIN)/kvgate bench --overhead | tee $(BENCH_RESULTS)/overhead.txt
	$(BIN)/kvgate bench --overhead --processes | tee $(BENCH_RESULTS)/overhead-processes.txt

## chaos: the full chaos run (1,000 requests while engines are killed, stalled and failing;
## under a minute); `go test` runs a 300-request version. Its figures go to RELIABILITY.md.
chaos:
	KVGATE_CHAOS=full go test -race -count=1 -run TestChaos -v ./server/

## fuzz-short: every fuzz target in the repo for FUZZTIME each (CI: about a minute in all).
## Targets are found by name, so a new one is fuzzed without editing this file; minimizing
## is capped because FuzzEncodeDecode's inputs take long to minimize. Go 1.26's coordinator can
## fail a timed run that found nothing (go.dev/issue/75804); such a run is repeated by count, as
## many executions as it reached (1,000 if it stopped while still gathering baseline coverage and
## so reached none), since a count budget sets no deadline. A run that passed without leaving the
## baseline (FuzzEncodeDecode's workers each load five tokenizers first, about 4 s) fuzzed nothing,
## so it too is repeated, by 1,000 executions.
FUZZTIME ?= 4s
fuzz-short: SHELL := /bin/bash
fuzz-short: .SHELLFLAGS := -eo pipefail -c
fuzz-short:
	@for file in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		pkg=./$$(dirname $${file#./}); \
		for target in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$file | cut -d' ' -f2); do \
			echo "fuzz $$pkg $$target"; \
			log=$$(mktemp); corpus=$$pkg/testdata/fuzz/$$target; \
			budget=$(FUZZTIME); \
			for try in 1 2; do \
				before=$$( (ls $$corpus 2>/dev/null || true) | wc -l); \
				if go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $$budget -fuzzminimizetime 2s $$pkg > $$log 2>&1; then \
					tail -n 3 $$log; \
					if [ $$try = 1 ] && grep -q 'gathering baseline coverage' $$log && ! grep -q 'execs: [0-9]' $$log; then \
						budget=1000x; \
						echo "  still gathering baseline coverage when its time ran out, so nothing was fuzzed: running again by count ($$budget)"; \
						continue; \
					fi; \
					break; \
				fi; \
				after=$$( (ls $$corpus 2>/dev/null || true) | wc -l); \
				if [ $$try = 1 ] && [ $$before = $$after ] && grep -q '^    context deadline exceeded$$' $$log; then \
					execs=$$( (grep -o 'execs: [0-9]*' $$log || true) | tail -n 1 | cut -d' ' -f2); \
					budget=$$(( $${execs:-0} > 1000 ? $${execs:-0} : 1000 ))x; \
					echo "  no failing input written: Go's fuzz coordinator stopped on its own deadline (go.dev/issue/75804, fixed in Go 1.27); running again by count ($$budget), a budget with no deadline to race"; \
					continue; \
				fi; \
				cut -c1-400 $$log | tail -n 60; rm -f $$log; exit 1; \
			done; \
			rm -f $$log; \
		done; \
	done

## promql-check: the PromQL of docs/metrics.md (SMG's documented queries must return data) and of the
## Grafana dashboard, run through Debian's Prometheus (installed, pinned, when missing and root)
## scraping `kvgate serve` on its embedded default. About 15 seconds.
.PHONY: promql-check
promql-check:
	scripts/promql-check.sh

## image: the container image (Containerfile, FROM scratch, no registry needed): a static kvgate
## (CGO_ENABLED=0, -trimpath, -s -w: no symbol table or DWARF, while stack traces keep their names; stamped with its commit as make build is), the distro's CA bundle and
## passwd/group entries for uid/gid 65532 are put in IMAGE_CONTEXT, then podman builds from it.
## PODMAN_FLAGS passes options podman needs on the host (image-check.sh: --storage-driver vfs).
IMAGE           ?= localhost/kvgate
IMAGE_VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
IMAGE_CONTEXT   := $(BIN)/image
IMAGE_CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
PODMAN          ?= podman
PODMAN_FLAGS    ?=
PODMAN_BUILD_FLAGS ?=
.PHONY: image-context image image-check
image-context:
	@test -r $(IMAGE_CA_BUNDLE) || { echo "no CA bundle at $(IMAGE_CA_BUNDLE): install ca-certificates or set IMAGE_CA_BUNDLE"; exit 1; }
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)
	CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w" -o $(IMAGE_CONTEXT)/kvgate ./cmd/kvgate
	cp $(IMAGE_CA_BUNDLE) $(IMAGE_CONTEXT)/ca-certificates.crt
	printf 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' > $(IMAGE_CONTEXT)/passwd
	printf 'nonroot:x:65532:\n' > $(IMAGE_CONTEXT)/group

image: image-context
	$(PODMAN) $(PODMAN_FLAGS) build $(PODMAN_BUILD_FLAGS) -f Containerfile --build-arg VERSION=$(IMAGE_VERSION) \
		-t $(IMAGE):$(IMAGE_VERSION) -t $(IMAGE):latest $(IMAGE_CONTEXT)

## image-check: install podman (pinned, from apt) when missing, make image, run `kvgate version` and
## `kvgate serve` in the container and check the router answers; SKIPPED when the host cannot run
## containers (no user namespaces, no cgroups, ...). scripts/image-check.sh.
image-check:
	scripts/image-check.sh

## smg: install SMG (smg 1.13.0 from PyPI, the Rust gateway behind a Python launcher) and its
## dependencies, pinned, into a virtual environment under KVGATE_CACHE (outside the clone), reused
## when that version is there; for `kvgate bench --peers smg --smg-bin $(SMG_BIN)`.
## smg-test: kvgate and SMG side by side on a small workload (bench's TestPeersSMG, ~2 minutes).
KVGATE_CACHE ?= $(HOME)/.cache/kvgate
SMG_VERSION  ?= 1.13.0
SMG_VENV     ?= $(KVGATE_CACHE)/smg-venv
SMG_BIN      := $(SMG_VENV)/bin/smg
SMG_PINS     := smg==$(SMG_VERSION) grpcio==1.85.3 grpcio-health-checking==1.85.1 protobuf==7.36.2 \
                PyYAML==6.0.4 setproctitle==1.3.8 typing_extensions==4.16.0
.PHONY: smg smg-test
smg: $(SMG_VENV)/.smg-$(SMG_VERSION)
$(SMG_VENV)/.smg-$(SMG_VERSION):
	python3 -m venv $(SMG_VENV)
	$(SMG_VENV)/bin/pip install --quiet --disable-pip-version-check $(SMG_PINS)
	$(SMG_BIN) --help >/dev/null
	touch $@
smg-test: smg
	KVGATE_SMG_BIN=$(SMG_BIN) go test -count=1 -run 'TestPeerRuns|TestPeersSMG' ./bench
## kvzmq-golden: rewrite workers/testdata/kvzmq/*.msgpack, vLLM-shaped KV event batches encoded by
## msgspec (pinned, from PyPI, in a virtual environment under ~/.cache/kvgate) with the struct options
## vLLM's ZMQ publisher uses; scripts/kvzmq-golden.py.
KVZMQ_VENV ?= $(KVGATE_CACHE)/kvzmq-golden-venv
MSGSPEC_VERSION ?= 0.19.0
.PHONY: kvzmq-golden
kvzmq-golden:
	test -x $(KVZMQ_VENV)/bin/python || python3 -m venv $(KVZMQ_VENV)
	$(KVZMQ_VENV)/bin/pip install -q msgspec==$(MSGSPEC_VERSION)
	$(KVZMQ_VENV)/bin/python scripts/kvzmq-golden.py
## proto-parity: compare kvgate's engine protos (api/proto/sglang, vllm, smg) field by field with
## the published smg-grpc-proto package (SMG's), installed at a pinned version into a virtual
## environment under KVGATE_CACHE (outside the clone, reused when present); fails on any
## difference and prints it. scripts/proto_parity.py; its PAIRS table lists the packages compared.
KVGATE_CACHE           ?= $(HOME)/.cache/kvgate
SMG_GRPC_PROTO_VERSION := 0.4.28
PROTO_PARITY_PROTOBUF  := 7.36.2
PROTO_PARITY_GRPCIO    := 1.85.3
PROTO_VENV             := $(KVGATE_CACHE)/proto-venv
PROTO_VENV_STAMP       := $(PROTO_VENV)/.smg-grpc-proto-$(SMG_GRPC_PROTO_VERSION)
.PHONY: proto-parity
proto-parity: $(BIN)/buf $(PROTO_VENV_STAMP)
	$(PROTO_VENV)/bin/python scripts/proto_parity.py --self-test
	$(BIN)/buf build -o $(BIN)/engine-protos.binpb
	$(PROTO_VENV)/bin/python scripts/proto_parity.py $(BIN)/engine-protos.binpb
$(PROTO_VENV_STAMP):
	test -x $(PROTO_VENV)/bin/python || python3 -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/pip install --quiet smg-grpc-proto==$(SMG_GRPC_PROTO_VERSION) \
		protobuf==$(PROTO_PARITY_PROTOBUF) grpcio==$(PROTO_PARITY_GRPCIO)
## real-engines: kvgate in front of two real vLLM engines (CPU build, from PyPI at the versions of
## scripts/realengine/requirements.txt) serving a tiny Qwen3-architecture model built offline with
## random weights beside the Qwen3 test tokenizer; the checks are test/realengine. The venv and the
## model are kept in KVGATE_CACHE (outside the clone) and reused while their pins are unchanged.
KVGATE_CACHE     ?= $(HOME)/.cache/kvgate
REAL_PYTHON      ?= python3
REAL_UV_VERSION  := 0.13.8
REAL_VENV        := $(KVGATE_CACHE)/vllm-venv
REAL_MODEL       := $(KVGATE_CACHE)/tiny-qwen3
REAL_REQS        := scripts/realengine/requirements.txt
REAL_STAMP       := $(REAL_VENV)/.stamp-$(shell sha256sum $(REAL_REQS) 2>/dev/null | cut -c1-16)
REAL_CA          := $(wildcard /etc/ssl/certs/ca-certificates.crt)
.PHONY: real-engines real-engines-env
real-engines: real-engines-env
	KVGATE_REAL_ENGINES=$(KVGATE_CACHE) go test -count=1 -v -timeout 75m ./test/realengine/

## real-engines-env: the venv and the model alone (make real-engines needs them).
real-engines-env: $(REAL_STAMP) testdata
	$(REAL_VENV)/bin/python scripts/realengine/build_model.py tokenize/testdata/tokenizers/qwen3 $(REAL_MODEL)

$(REAL_STAMP): | $(REAL_REQS)
	rm -rf $(REAL_VENV)
	$(REAL_PYTHON) -m venv $(REAL_VENV)
	$(REAL_VENV)/bin/pip install -q uv==$(REAL_UV_VERSION)
	$(if $(REAL_CA),SSL_CERT_FILE=$(REAL_CA)) $(REAL_VENV)/bin/uv pip install --python $(REAL_VENV)/bin/python \
		--no-deps -r $(REAL_REQS)
	touch $@
## openai-sdk-test: the official openai Python package (PyPI, pinned, with its dependencies, in a
## virtual environment under KVGATE_CACHE, reused when present) and openai npm package (pinned by
## scripts/openai-node's lockfile, npm ci) against kvgate's OpenAI-compatible HTTP front: streaming
## chat with tool calls and reasoning, structured output (Python: the parse helper with a Pydantic
## model), embeddings, completions from token ids and each error class (scripts/openai_sdk_check.py
## and scripts/openai-node/check.mjs, run by cmd/kvgate's TestOpenAIPythonSDK and TestOpenAINodeSDK
## in front of scripted simulated engines). About 20 seconds once installed.
OPENAI_SDK_VENV ?= $(KVGATE_CACHE)/openai-sdk-venv
OPENAI_SDK_PINS := openai==3.57.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 anyio==4.16.0 \
                   h11==0.16.0 httpcore2==2.16.2 httpx2==2.16.2 idna==3.20 jiter==0.19.0 sniffio==1.3.1 \
                   truststore==0.10.5 typing-inspection==0.4.5 typing_extensions==4.16.0
.PHONY: openai-sdk-test
openai-sdk-test: $(OPENAI_SDK_VENV)/.openai-3.57.0
	cd scripts/openai-node && npm ci --no-audit --no-fund
	KVGATE_OPENAI_PYTHON=$(OPENAI_SDK_VENV)/bin/python KVGATE_OPENAI_NODE=$$(command -v node) \
		go test -count=1 -run 'TestOpenAIPythonSDK|TestOpenAINodeSDK' ./cmd/kvgate
$(OPENAI_SDK_VENV)/.openai-3.57.0:
	test -x $(OPENAI_SDK_VENV)/bin/python || python3 -m venv $(OPENAI_SDK_VENV)
	$(OPENAI_SDK_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(OPENAI_SDK_PINS)
	touch $@

## real-engines-bench: kvgate and SMG (cache_aware, then round_robin, alternating) in front of the
## same two real vLLM engines with a short shared-prefix workload (200 requests a run, the engines'
## caches flushed between runs); tables and JSON in BENCH_OUT (a new temp dir when empty). Not in CI:
## about 6 minutes of engine start-up and 4 of runs on 2 cores.
BENCH_OUT ?=
.PHONY: real-engines-bench
real-engines-bench: real-engines-env smg
	KVGATE_CACHE=$(KVGATE_CACHE) SMG_BIN=$(SMG_BIN) scripts/realengine/bench.sh $(BENCH_OUT)

## real-engines-nixl: NIXL (nixl 1.5.1 and its nixl-cu13 build, from PyPI; it runs on CPU over UCX) into
## KVGATE_CACHE/nixl-site, beside the vLLM venv rather than in it, for vLLM's NixlConnector.
## real-engines-pd: prefill/decode disaggregation with two real vLLM CPU engines and NIXL behind kvgate
## serve --pd-disaggregation (scripts/realengine/pd.sh); not in CI (about 8 minutes on 2 cores).
NIXL_VERSION ?= 1.5.1
NIXL_SITE    := $(KVGATE_CACHE)/nixl-site
.PHONY: real-engines-nixl real-engines-pd
real-engines-nixl: $(NIXL_SITE)/.nixl-$(NIXL_VERSION)
$(NIXL_SITE)/.nixl-$(NIXL_VERSION): $(REAL_STAMP)
	rm -rf $(NIXL_SITE)
	$(REAL_VENV)/bin/python -m pip install -q --no-deps --target $(NIXL_SITE) nixl==$(NIXL_VERSION) nixl-cu13==$(NIXL_VERSION)
	touch $@
real-engines-pd: real-engines-env real-engines-nixl
	KVGATE_CACHE=$(KVGATE_CACHE) NIXL_SITE=$(NIXL_SITE) scripts/realengine/pd.sh
## openai-bench: kvgate and SMG side by side through one client neither wrote: inference-perf (PyPI,
## pinned in scripts/openai-bench-requirements.txt; it needs Python >= 3.12, OPENAI_BENCH_PYTHON)
## sends one shared-prefix workload to each router's OpenAI-compatible HTTP API, in front of fresh
## simulated engines (an 8B model on one H100), one router after the other (scripts/openai-bench.sh;
## about 2 minutes). Needs make smg.
OPENAI_BENCH_PYTHON ?= python3.12
OPENAI_BENCH_VENV   ?= $(KVGATE_CACHE)/inference-perf-venv
.PHONY: openai-bench
openai-bench: build smg $(OPENAI_BENCH_VENV)/.inference-perf-0.7.0
	scripts/openai-bench.sh $(BIN)/kvgate $(SMG_BIN) $(OPENAI_BENCH_VENV)/bin/inference-perf
$(OPENAI_BENCH_VENV)/.inference-perf-0.7.0: scripts/openai-bench-requirements.txt
	test -x $(OPENAI_BENCH_VENV)/bin/python || $(OPENAI_BENCH_PYTHON) -m venv $(OPENAI_BENCH_VENV)
	$(OPENAI_BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r scripts/openai-bench-requirements.txt
	touch $@
## trace-ui: Jaeger 2.13.0 (its all-in-one; Go module v1.76.0, built from the Go module proxy into
## ~/.cache/kvgate, once) in the foreground: OTLP/gRPC on 127.0.0.1:4317, its UI on
## http://127.0.0.1:16686, traces in memory. Pair it with `kvgate serve --otlp-endpoint 127.0.0.1:4317`.
JAEGER_VERSION ?= v1.76.0
JAEGER_DIR     ?= $(KVGATE_CACHE)/jaeger-$(JAEGER_VERSION)
.PHONY: trace-ui
trace-ui: $(JAEGER_DIR)/jaeger
	$(JAEGER_DIR)/jaeger
$(JAEGER_DIR)/jaeger:
	mkdir -p $(JAEGER_DIR)
	cd $(JAEGER_DIR) && { test -f go.mod || go mod init kvgate-jaeger-tool; } && \
	  go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@$(JAEGER_VERSION) && \
	  go build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger
## aiperf-ci: a standard benchmark tool in CI: AIPerf (PyPI, pinned with its dependencies in
## scripts/aiperf-requirements.txt, in a virtual environment under KVGATE_CACHE, reused while the pins
## are unchanged; it runs on Python 3.11, which inference-perf does not) streams 64 chat completions
## to kvgate's OpenAI-compatible front on its embedded default (random replies, 10x speed) and fails on
## any failed request (AIPerf's count or kvgate's by status code) or none completed, after a self-check
## that a run against a failing engine is judged failed (scripts/aiperf-ci.sh). About 30 seconds with
## the venv in place (2 minutes on its first run); installing the venv took about 9 minutes here.
AIPERF_PYTHON ?= python3
AIPERF_REQS   := scripts/aiperf-requirements.txt
AIPERF_VENV   ?= $(KVGATE_CACHE)/aiperf-venv
AIPERF_STAMP  := $(AIPERF_VENV)/.stamp-$(shell sha256sum $(AIPERF_REQS) 2>/dev/null | cut -c1-16)
.PHONY: aiperf-ci
aiperf-ci: $(AIPERF_STAMP)
	go build -buildvcs=auto -o $(BIN)/kvgate ./cmd/kvgate
	scripts/aiperf-ci.sh $(BIN)/kvgate $(AIPERF_VENV)/bin/aiperf
$(AIPERF_STAMP): | $(AIPERF_REQS)
	rm -rf $(AIPERF_VENV)
	$(AIPERF_PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r $(AIPERF_REQS)
	touch $@
