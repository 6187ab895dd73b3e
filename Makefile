# agentd — build, test, run. Needs only Go (and, for test-docker, a Docker Engine).
GO        ?= go
BIN       := bin/agentd
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: build test test-short test-race test-docker test-sim test-crash testbox-image run bench lint fuzz clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agentd

## test: every test, with the race detector off (crash tests spawn real processes).
test:
	$(GO) test -count=1 ./...

## test-docker: integration tests against the real Docker Engine (needs `docker info` to answer).
test-docker: testbox-image
	AGENTD_DOCKER_TESTS=1 $(GO) test -count=1 -run Docker ./internal/docker ./cmd/agentd

## test-sim: the deterministic simulation over SEEDS seeds, and the proof that it and the
## engine's scripts find the seed's bug when the guard is compiled out (-tags simbug).
## Replay one: -seed N.
SEEDS ?= 1000
test-sim:
	$(GO) test -count=1 -timeout 0 -run 'TestSim$$|TestSimIsDeterministic' ./internal/simulation -seeds $(SEEDS) -v
	$(GO) test -count=1 -tags simbug -run TestSimFindsTheSeedBug -v ./internal/simulation
	$(GO) test -count=1 -tags simbug -run TestScriptsFailWithoutTheGuard -v ./internal/engine

## test-crash: the kill -9 loop of the real binary (50 SIGKILLs) and the failpoints.
test-crash:
	AGENTD_CRASH_LOOP=1 $(GO) test -count=1 -run 'TestCrashLoop|TestFailpoints' ./cmd/agentd

## testbox-image: the test container image, built without a registry: a static binary
## imported as the only file of an image (no base image to pull, no BuildKit frontend).
testbox-image:
	mkdir -p bin/testbox
	CGO_ENABLED=0 $(GO) build -o bin/testbox/testbox ./testdata/testbox
	tar -C bin/testbox -cf bin/testbox.tar testbox
	docker import --change 'ENTRYPOINT ["/testbox"]' bin/testbox.tar agentd-testbox:latest

## test-race: the packages with goroutines, under the race detector.
test-race:
	$(GO) test -race -count=1 -short ./internal/journal ./internal/engine ./internal/introspect ./internal/backend ./internal/controlplane ./internal/benchmark

test-short:
	$(GO) test -count=1 -short ./...

## run: the dev demo — control plane, agent, simulated runtime and a workload in one process.
run: build
	./$(BIN) dev

## bench: every benchmark, one table (figure, baseline, ratio, target, pass/fail); several
## minutes. BENCH_FLAGS=--quick for smaller sizes.
bench: build
	./$(BIN) bench all $(BENCH_FLAGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## fuzz: run each fuzz target for FUZZTIME (the seed corpora run in `make test`).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime $(FUZZTIME) ./internal/journal
	$(GO) test -run '^$$' -fuzz FuzzDecodeTask -fuzztime $(FUZZTIME) ./internal/protocol
	$(GO) test -run '^$$' -fuzz FuzzClassifyReport -fuzztime $(FUZZTIME) ./internal/protocol

clean:
	rm -rf bin
