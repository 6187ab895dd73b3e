# agentd — build, test, run. Needs only Go (and, for test-docker, a Docker Engine).
GO        ?= go
BIN       := bin/agentd
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
DIST      ?= dist
PLATFORMS ?= linux/amd64 linux/arm64

.PHONY: test-otel test-browser build test test-short test-race test-docker test-sim test-crash test-powerloss test-dist testbox-image run bench bench-fleet lint fuzz dist clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agentd

## build-bench: agentd-bench, the benchmarks' own binary (the daemon links none of them).
BENCH_BIN := bin/agentd-bench
.PHONY: build-bench
build-bench:
	$(GO) build -o $(BENCH_BIN) ./cmd/agentd-bench

## test: every test, with the race detector off (crash tests spawn real processes).
test:
	$(GO) test -count=1 ./...

## dist: a release in $(DIST): static binaries for $(PLATFORMS) (version, commit and date
## stamped in; the build date is the commit's, so the same commit builds the same bytes),
## a .deb and an .rpm of each (tools/pack, with nfpm: its own module, so nfpm never enters
## the agent's go.mod; MAINTAINER='Name <address>' signs them, else git config's identity), the systemd unit and its drop-in for bind roots, the Prometheus rules
## and Grafana dashboard, and SHA256SUMS over them all.
dist:
	rm -rf $(DIST) && mkdir -p $(DIST)
	set -e; for p in $(PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" \
	    -o $(DIST)/agentd-$(VERSION)-$$os-$$arch ./cmd/agentd; done
	cd tools/pack && $(GO) run . -dist $(abspath $(DIST)) -repo $(CURDIR) -describe $(VERSION) $(if $(MAINTAINER),-maintainer "$(MAINTAINER)") -arch "$(foreach p,$(PLATFORMS),$(lastword $(subst /, ,$(p))))"
	cp deploy/agentd.service deploy/agentd-bind-roots.conf deploy/prometheus-rules.yml deploy/grafana-dashboard.json $(DIST)/
	cd $(DIST) && sha256sum agentd-* agentd_* agentd.service agentd-bind-roots.conf prometheus-rules.yml grafana-dashboard.json > SHA256SUMS

## test-browser: only the status page in headless Chromium (also part of make test).
test-browser:
	$(GO) test -count=1 -run 'TestStatusPageInABrowser|TestAStatusPageSquattersWorkerGoesAtTheNextVisit' -v ./cmd/agentd

## test-dist: tools/pack's own tests (versions, the unit), then `make dist` into a temporary
## directory: its binaries run, are static, and say this commit; its .deb and .rpm read back with
## dpkg-deb and rpm (files, modes, conffile, scripts), lintian finds no error, and the .deb
## installs, upgrades and purges in a Debian root built by debootstrap (cached in bin/; each
## part skips, saying why, where its tool or root is missing). Slow: two cross-builds.
test-dist:
	cd tools/pack && $(GO) test -count=1 ./...
	AGENTD_DIST_TEST=1 $(GO) test -count=1 -timeout 30m -run TestDist -v ./cmd/agentd

## test-docker: integration tests against the real Docker Engine (needs `docker info` to answer).
test-docker: testbox-image
	AGENTD_DOCKER_TESTS=1 $(GO) test -count=1 -run Docker ./internal/docker ./internal/benchmark ./cmd/agentd ./cmd/agentd-bench

## test-podman: the runtime contract and the end-to-end Docker tests against Podman's Docker
## API, on a Podman API service of the test's own (installed with apt when missing; its
## settings in testdata/podman; the host's Docker untouched). README "On Podman".
## PODMAN_OPTIONAL=1 (.ci/run) skips, saying why, where Podman cannot be installed or started.
.PHONY: test-podman
test-podman:
	PODMAN_OPTIONAL=$(PODMAN_OPTIONAL) testdata/podman/test-podman.sh

## test-sim: the deterministic simulation over SEEDS seeds, starting at a fresh random offset
## every run so each run explores seeds no run tried before (the first line names them;
## SIM_OFFSET=K, or AGENTD_SIM_OFFSET=K, runs K+1 … K+SEEDS again; replay one: -seed N); the
## named regression seeds; and the proof that each planted bug is found: test binaries built with
## -tags plantedbugs, each run with AGENTD_PLANTED_BUGS naming the guard switched off
## (internal/guard: the one place guards are, and what each one's tests are). The seed's bug
## (cleanup-after-ack: the simulation and the engine's scripts), a container STOPPED while it runs
## (start-in-flight), a container run twice (start-in-flight with runtime-start-check), an image of
## a live task removed (image-in-use), an inspect overtaking its start (call-waits: the core's
## property test; the simulation with the late-start fence off too, which stands behind it), a record the projection refuses never journaled
## (settle-rule: the agent stays up with the task quarantined, restarts, and verifies), and a
## container declared STOPPED while a late start may land (late-start-fence: the engine's scripts
## of the explorer's counterexamples).
SEEDS ?= 1000
SIM_OFFSET ?= $(or $(AGENTD_SIM_OFFSET),random)
test-sim:
	$(GO) test -count=1 -timeout 0 -run 'TestSim$$|TestSimIsDeterministic|TestSimRegressions' ./internal/simulation -seeds $(SEEDS) -seed-offset $(SIM_OFFSET) -v
	AGENTD_PLANTED_BUGS=cleanup-after-ack $(GO) test -count=1 -tags plantedbugs -run 'TestSimFindsTheSeedBug|TestScriptsFailWithoutTheGuard' -v ./internal/simulation ./internal/engine
	AGENTD_PLANTED_BUGS=start-in-flight $(GO) test -count=1 -tags plantedbugs -run TestSimFindsTheStartBug -v ./internal/simulation
	AGENTD_PLANTED_BUGS=start-in-flight,runtime-start-check $(GO) test -count=1 -tags plantedbugs -run 'TestSimFindsTheRerunBug|TestRuntimeBugStartsAnExitedContainerAgain' -v ./internal/simulation ./internal/simruntime
	AGENTD_PLANTED_BUGS=image-in-use $(GO) test -count=1 -tags plantedbugs -run TestSimFindsTheImageBug -v ./internal/simulation
	AGENTD_PLANTED_BUGS=call-waits $(GO) test -count=1 -tags plantedbugs -run TestPropertyFindsTheWaitsBug -v ./internal/fsm
	AGENTD_PLANTED_BUGS=call-waits,late-start-fence $(GO) test -count=1 -tags plantedbugs -run TestSimFindsTheWaitsBug -v ./internal/simulation
	AGENTD_PLANTED_BUGS=settle-rule $(GO) test -count=1 -tags plantedbugs -run 'TestRefusedRecordIsNeverJournaled|TestAQuarantinedTaskIsShownAndNamed' -v ./internal/engine ./internal/introspect
	AGENTD_PLANTED_BUGS=late-start-fence $(GO) test -count=1 -tags plantedbugs -run TestScriptsFailWithoutTheGuard -v ./internal/engine

## check-model: the explorer of the core (internal/explore): the states of 3 tasks of 2
## containers within depth 40, two faults and a crash a path — breadth first while a level
## holds at most CHECK_MODEL_FRONTIER states, then depth first to depth 40 from that level —
## up to CHECK_MODEL_STATES distinct states or CHECK_MODEL_TIME, with 0 violations, failing
## short of depth 40; its peak memory and the load printed (/usr/bin/time, where installed).
## Then every planted bug found by it (-tags plantedbugs, each in a process with its guard
## off: a counterexample of at most 30 steps within 60 s, printed as an engine script).
CHECK_MODEL_STATES ?= 1000000
CHECK_MODEL_TIME ?= 10m
CHECK_MODEL_FRONTIER ?= $(shell expr $(CHECK_MODEL_STATES) / 100)
.PHONY: check-model
check-model:
	@mkdir -p bin
	$(GO) test -c -o bin/explore.test ./internal/explore
	@uptime
	$(if $(wildcard /usr/bin/time),/usr/bin/time -f 'check-model: peak memory %M KB; wall %e s; %U s user; %S s system') bin/explore.test -test.count=1 -test.timeout 0 -test.run 'TestCheckModel$$' -test.v -explore.model -explore.states $(CHECK_MODEL_STATES) -explore.frontier $(CHECK_MODEL_FRONTIER) -explore.timeout $(CHECK_MODEL_TIME)
	@uptime
	$(GO) test -count=1 -timeout 0 -tags plantedbugs -run 'TestExplorerFindsEveryPlantedBug$$' -v ./internal/explore

## test-otel: three agents (simulated runtime, one control plane) ship their journals through a
## real OpenTelemetry Collector built from testdata/otelcol (a module of its own: the Collector's
## dependencies never enter agentd's), which refuses (503) and stalls for a while, one agent
## SIGKILLed; every committed record arrives, in order, nothing sealed; and the Collector
## validates deploy/otelcol-agentd.yaml. Skipped, saying why, when that module cannot be built
## (its modules come from the Go module proxy).
test-otel:
	@mkdir -p bin
	@if (cd testdata/otelcol && $(GO) build -o ../../bin/otelcol .); then \
	  AGENTD_OTELCOL=$$PWD/bin/otelcol $(GO) test -count=1 -run 'TestOTelCollector' -v ./cmd/agentd; \
	else \
	  echo "test-otel skipped: the test Collector (testdata/otelcol) could not be built, see the error above (are the Go module proxy or its cache reachable?)"; \
	fi

## test-crash: the kill -9 loop of the real binary (50 SIGKILLs) and the failpoints.
test-crash:
	AGENTD_CRASH_LOOP=1 $(GO) test -count=1 -run 'TestCrashLoop|TestFailpoints' ./cmd/agentd

## test-powerloss: power loss, not only kill -9 (issue 44). On a lazy file system (internal/lazyfs,
## FUSE: everything not fsynced is lost at a power cut): its own contract, and that a lazy file
## system keeping unsynced writes fails it (-tags lazyfsforgets); every distinct crash state of a
## journal run of POWERLOSS_TASKS tasks (about 25 each) opened and checked; the suite finding a
## planted missing fdatasync (-tags syncbug); the real agent power-cut POWERLOSS_CUTS times under
## load. Needs root and /dev/fuse (installs fuse3 with apt when missing); skips saying why without.
POWERLOSS_TASKS ?= 450
POWERLOSS_CUTS ?= 200
test-powerloss:
	@if ! command -v fusermount3 >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y --no-install-recommends fuse3; fi
	@if [ "$$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then \
	  echo "test-powerloss skipped: it mounts FUSE itself, which needs root (uid $$(id -u)) and /dev/fuse ($$(ls -l /dev/fuse 2>&1))"; exit 0; fi; \
	set -e; \
	$(GO) test -count=1 -v -run . ./internal/lazyfs; \
	$(GO) test -count=1 -v -tags lazyfsforgets -run TestAForgetfulFSFailsTheScenario ./internal/lazyfs; \
	export AGENTD_POWERLOSS=1; \
	$(GO) test -count=1 -v -timeout 20m -run TestEveryCrashStateOfAJournalRun ./internal/powerloss -powerloss-tasks $(POWERLOSS_TASKS); \
	$(GO) test -count=1 -v -tags syncbug -run TestTheSuiteFindsTheMissingFsync ./internal/powerloss -powerloss-tasks 30; \
	AGENTD_POWERLOSS_CUTS=$(POWERLOSS_CUTS) $(GO) test -count=1 -v -timeout 20m -run TestPowerLossLoop ./cmd/agentd

## test-upgrade: tasks run under the previous release (built from its commit, upgrade_test.go),
## the binary replaced by this one while they run: every task adopted, nothing run twice, the
## journal upgraded in place once, the old binary refused by the upgraded journal.
.PHONY: test-upgrade
test-upgrade:
	AGENTD_UPGRADE_TEST=1 $(GO) test -count=1 -timeout 20m -run TestUpgradeKeepsEveryTask -v ./cmd/agentd

## testbox-image: the test container image, built without a registry: a static binary
## imported as the only file of an image (no base image to pull, no BuildKit frontend). The
## build it replaces is removed, so repeated runs leave no dangling images.
testbox-image:
	mkdir -p bin/testbox
	CGO_ENABLED=0 $(GO) build -o bin/testbox/testbox ./testdata/testbox
	tar -C bin/testbox -cf bin/testbox.tar testbox
	old=$$(docker image inspect -f '{{.Id}}' agentd-testbox:latest 2>/dev/null || true); \
	  docker import --change 'ENTRYPOINT ["/testbox"]' bin/testbox.tar agentd-testbox:latest && \
	  new=$$(docker image inspect -f '{{.Id}}' agentd-testbox:latest) && \
	  if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then docker image rm "$$old" >/dev/null 2>&1 || true; fi

## image: the agent as a container image $(IMAGE), built like testbox-image: the static binary,
## an empty /tmp and a 0700 /var/lib/agentd imported as the image's only files (no base image,
## no pull). A rebuild of the same tag removes the image it replaces. README "As a container"
## has the docker run line.
IMAGE ?= agentd:$(VERSION)
.PHONY: image
image:
	rm -rf bin/image && mkdir -p bin/image/tmp bin/image/var/lib/agentd bin/image/etc/agentd
	chmod 1777 bin/image/tmp && chmod 0700 bin/image/var/lib/agentd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/image/agentd ./cmd/agentd
	tar -C bin/image --owner=0 --group=0 --numeric-owner -cf bin/agentd-image.tar agentd tmp var etc
	old=$$(docker image inspect -f '{{.Id}}' $(IMAGE) 2>/dev/null || true); \
	  docker import --change 'ENTRYPOINT ["/agentd"]' --change 'CMD ["run"]' \
	    --change 'ENV AGENTD_DATA_DIR=/var/lib/agentd' --change 'LABEL org.opencontainers.image.version=$(VERSION)' \
	    bin/agentd-image.tar $(IMAGE) && \
	  new=$$(docker image inspect -f '{{.Id}}' $(IMAGE)) && \
	  if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then docker image rm "$$old" >/dev/null 2>&1 || true; fi

## test-race: the packages with goroutines, under the race detector.
test-race:
	$(GO) test -race -count=1 -short ./internal/journal ./internal/engine ./internal/introspect ./internal/sockowner ./internal/backend ./internal/controlplane ./internal/benchmark ./internal/otlpship

test-short:
	$(GO) test -count=1 -short ./...

## run: the dev demo — control plane, agent, simulated runtime and a workload in one process.
run: build
	./$(BIN) dev

## bench: every benchmark, one table (figure, baseline, ratio, target, pass/fail) after the
## machine it ran on; exits non-zero when a row fails. Several minutes. BENCH_FLAGS=--quick for
## smaller sizes. The Docker row needs the engine and the test image (built here when the
## engine answers).
bench: build build-bench
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory testbox-image >/dev/null; fi
	./$(BENCH_BIN) all $(BENCH_FLAGS)

## bench-fleet: 1,000 whole agents in one process against one control plane throttled to
## 50 req/s, a fleet for each throttle kind (Retry-After naming the turn, the next token, nothing):
## storm, slow control plane, outages (refused, hanging), restart, the naive policy beside;
## exits non-zero when a target is missed. Journals on FLEET_JOURNALS (a tmpfs by default).
FLEET_JOURNALS ?= /dev/shm
bench-fleet: build-bench
	./$(BENCH_BIN) fleet --agents 1000 --rps 50 --burst 50 --journal-dir $(FLEET_JOURNALS) $(FLEET_FLAGS)

## lint: gofmt, goimports grouping (standard library, then others, then agentd's own), go vet.
GOIMPORTS ?= $(GO) run golang.org/x/tools/cmd/goimports@v0.52.0
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@out=$$($(GOIMPORTS) -local github.com/agentd/agentd -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "goimports -local github.com/agentd/agentd would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd tools/pack && $(GO) vet ./...

## fuzz: run each fuzz target for FUZZTIME (the seed corpora run in `make test`).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime $(FUZZTIME) ./internal/journal
	$(GO) test -run '^$$' -fuzz FuzzDecodeTask -fuzztime $(FUZZTIME) ./internal/protocol
	$(GO) test -run '^$$' -fuzz FuzzClassifyReport -fuzztime $(FUZZTIME) ./internal/protocol
	$(GO) test -run '^$$' -fuzz FuzzIPLiteral -fuzztime $(FUZZTIME) ./internal/protocol

clean:
	rm -rf bin $(DIST)
