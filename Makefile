# kvgate build, code generation and checks.
#
# Tools are installed into ./bin at pinned versions, so `make proto` produces the
# same bytes on every machine.

BUF_VERSION          := v1.75.0
PROTOC_GEN_GO        := v1.36.12
PROTOC_GEN_GO_GRPC   := v1.6.0

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

.PHONY: all build test check proto tools lint vet fmt-check clean testdata golden golden-check bench chaos fuzz-short

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

## lint: buf lint on the public API.
lint: tools
	$(BIN)/buf lint

vet:
	go vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## check: generated code is current, protos lint clean, code formatted and vetted.
check: proto lint fmt-check vet
	@if [ -n "$$(git status --porcelain -- api/gen)" ]; then \
		echo "api/gen differs from what 'make proto' produces:"; \
		git status --porcelain -- api/gen; exit 1; fi
	@echo "check: ok"

clean:
	rm -rf $(BIN)

## testdata: fetch the five real tokenizers (pinned, checksummed) into tokenize/testdata/tokenizers/
## (git-ignored); golden: regenerate tokenize/testdata/golden/ from Hugging Face tokenizers' Node
## binding; golden-check: regenerate into a temp dir and fail if it differs from the committed files.
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
BENCH_POLICIES := cache_aware,cache_aware:smallest_tree,prefix_hash,power_of_two,round_robin,random
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

## chaos: the full chaos run (1,000 requests while engines are killed, stalled and failing;
## under a minute); `go test` runs a 300-request version. Its figures go to RELIABILITY.md.
chaos:
	KVGATE_CHAOS=full go test -race -count=1 -run TestChaos -v ./server/

## fuzz-short: every fuzz target in the repo for FUZZTIME each (CI: about a minute in all).
## Targets are found by name, so a new one is fuzzed without editing this file; minimizing
## is capped because FuzzEncodeDecode's inputs take long to minimize.
FUZZTIME ?= 4s
fuzz-short: SHELL := /bin/bash
fuzz-short: .SHELLFLAGS := -eo pipefail -c
fuzz-short:
	@for file in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		pkg=./$$(dirname $${file#./}); \
		for target in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$file | cut -d' ' -f2); do \
			echo "fuzz $$pkg $$target"; \
			log=$$(mktemp); \
			if go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg > $$log 2>&1; then \
				tail -n 3 $$log; rm -f $$log; \
			else \
				cut -c1-400 $$log | tail -n 60; rm -f $$log; exit 1; \
			fi; \
		done; \
	done
