# FlexKV developer targets. `make help` lists them.

GO ?= go

# make sim: seeds per protocol (the ordering simulator; the whole-database
# simulator runs DBSEEDS), and how long the whole run may take.
SEEDS ?= 100000
DBSEEDS ?= 5000
SIMTIMEOUT ?= 24h

# make fuzz: time per fuzz target.
FUZZTIME ?= 30s

# make replay: one simulator run. SEED is required; the others are passed on
# only when set. Paste the values from the `replay:` line a failing run
# prints, or pass its whole flag list in ARGS.
SEED ?=
PROTOCOL ?= flexcast
GROUPS ?=
MESSAGES ?=
DST_MAX ?=
DROP ?=
DUP ?=
PARTITION ?=
GC_TICKS ?=
LOG ?=
ARGS ?=
REPLAY_FLAGS = --protocol $(PROTOCOL) --seed $(SEED) \
	$(if $(GROUPS),--groups $(GROUPS)) $(if $(MESSAGES),--messages $(MESSAGES)) \
	$(if $(DST_MAX),--dst-max $(DST_MAX)) $(if $(DROP),--drop $(DROP)) $(if $(DUP),--dup $(DUP)) \
	$(if $(PARTITION),--partition $(PARTITION)) $(if $(GC_TICKS),--gc-ticks $(GC_TICKS)) \
	$(if $(LOG),--delivery-log $(LOG)) $(ARGS)

# make jepsen: each protocol's run on hosts (root and iproute2), its
# history and verdict under OUT/<protocol>/; SEED (above) replays a run's
# workload and fault schedule. MODEL is what a run must satisfy:
# strict-serializable (DESIGN 12's claim) or serializable.
DURATION ?= 5m
PROTOCOLS ?= flexcast,skeen,tree
OUT ?= jepsen-out
MODEL ?= strict-serializable

# make lint: pinned so that every machine reports the same findings.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.DEFAULT_GOAL := help
.PHONY: help test race sim replay jepsen outage fuzz lint bench bench-scale proto docker compose-test soak ci contrib-test

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-13s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

test: ## vet, every test (the ordering simulator runs 2000 seeds per protocol, the whole-database one 200; the outage claims and the hosts' faults and cluster changes on hosts alone, after the others, since they hold every second's rate and a member's promotion on a starved machine), FlexCast's core, the channel layer, the group state machine, kv and the executor again with their invariant checks, the shell packages and the gTPC-C driver again under -race
	$(GO) vet ./...
	$(GO) test -shuffle=on -timeout 20m $$($(GO) list ./... | grep -v '/jepsen/outage$$' | grep -v '/jepsen/hosts$$')
	$(GO) test -shuffle=on -timeout 10m ./jepsen/outage/
	$(GO) test -shuffle=on -timeout 10m ./jepsen/hosts/
	$(GO) test -tags invariants -shuffle=on -timeout 10m ./internal/invariants/ ./multicast/flexcast/ ./multicast/channel/ ./group/ ./kv/ ./executor/
	$(GO) test -race -shuffle=on -timeout 20m ./replication/...
	$(GO) test -race -short -shuffle=on -timeout 10m ./server/... ./cluster/... ./client/... ./txn/... ./executor/...
	$(GO) test -race -shuffle=on -timeout 5m -run 'TestRunTrims|TestRunTrimNone|TestRunConcurrent|TestRunCancelled|TestRecorder|TestOutcome|TestProgressLine' ./gtpcc/

contrib-test: ## the go-ycsb binding's own module (contrib/ycsb: go-ycsb's dependencies, kept out of the main module): vet and its tests, a TLS cluster included
	cd contrib/ycsb && $(GO) vet ./... && $(GO) test -timeout 5m ./...

race: ## the race detector on every package but the simulator, in -short mode
	$(GO) test -race -short -timeout 10m $$($(GO) list ./... | grep -v '/multicast/sim$$')

sim: ## many simulator seeds for every protocol (SEEDS=100000 ordering, DBSEEDS=5000 whole-database)
	$(GO) test ./multicast/sim -run '^TestSimSeeds$$' -count=1 -timeout $(SIMTIMEOUT) -sim.seeds=$(SEEDS)
	$(GO) test ./dbsim -run '^TestSeeds$$' -count=1 -timeout $(SIMTIMEOUT) -dbsim.seeds=$(DBSEEDS)

replay: ## replay one simulator run: SEED=... PROTOCOL=... [GROUPS= MESSAGES= DST_MAX= DROP= DUP= PARTITION= GC_TICKS= LOG= ARGS=]
	@test -n "$(SEED)" || { echo "make replay: set SEED (and the other values of the failing run's replay line)" >&2; exit 2; }
	$(GO) run ./cmd/flexkv sim $(strip $(REPLAY_FLAGS))

jepsen: ## Jepsen-style runs on hosts under kernel faults, checked: [DURATION=5m PROTOCOLS=flexcast,skeen,tree SEED=N OUT=jepsen-out MODEL=strict-serializable]
	$(GO) test ./jepsen -run '^TestJepsen$$' -count=1 -v -timeout 3h \
		-jepsen.duration=$(DURATION) -jepsen.protocols=$(PROTOCOLS) -jepsen.out=$(abspath $(OUT)) \
		-jepsen.model=$(MODEL) $(if $(SEED),-jepsen.seed=$(SEED))

# make outage: each protocol on hosts (root and iproute2), each group of CUT
# faulted in turn (FAULTS: cut, its peer traffic dropped both ways; and/or
# kill-leader) for DURATION while loops of two-key transfers run (MIXES:
# others, between the groups not faulted; both, those and between the faulted
# group and each other; with-GROUP, those and between the faulted group and
# GROUP; own, each other group's own; empty: others,both for
# a cut, own for a kill), counted BEFORE each fault and AFTER its heal. The
# rates per second go to
# OUT/outage.{txt,json,csv}. DURATION and OUT have defaults of their own
# here, since make jepsen reads the same names.
CUT ?= eu-west-1,eu-west-3,eu-central-1
FAULTS ?= cut
MIXES ?=
WORKERS ?= 4
BEFORE ?= 8s
AFTER ?= 8s
OUTAGE_HOLD = $(if $(filter command line environment,$(origin DURATION)),$(DURATION),15s)
OUTAGE_OUT = $(if $(filter command line environment,$(origin OUT)),$(OUT),outage-out)

outage: ## blast radius of one group's outage on hosts, per protocol: [PROTOCOLS=flexcast,skeen,tree CUT=eu-west-1,eu-west-3,eu-central-1 DURATION=15s FAULTS=cut MIXES= WORKERS=4 BEFORE=8s AFTER=8s OUT=outage-out]
	$(GO) test ./jepsen/outage -run '^TestOutage$$' -count=1 -v -timeout 3h \
		-outage.protocols=$(PROTOCOLS) -outage.groups=$(CUT) -outage.hold=$(OUTAGE_HOLD) \
		-outage.faults=$(FAULTS) -outage.mixes=$(MIXES) -outage.workers=$(WORKERS) \
		-outage.before=$(BEFORE) -outage.after=$(AFTER) -outage.out=$(abspath $(OUTAGE_OUT))

fuzz: ## every Fuzz target of every package, FUZZTIME each (FUZZTIME=30s)
	@set -e; found=0; \
	for pkg in $$($(GO) list ./...); do \
		list=$$($(GO) test -list '^Fuzz' $$pkg); \
		for target in $$(echo "$$list" | grep '^Fuzz' || true); do \
			found=$$((found + 1)); \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME); \
		done; \
	done; \
	echo "fuzzed $$found targets"

lint: ## golangci-lint (.golangci.yml), built from the module proxy on first use
	$(GOLANGCI_LINT) run ./...

bench: ## benchmarks of the cores, the channel layer and the replicated cluster
	$(GO) test -run '^$$' -bench . -benchmem ./multicast/...
	$(GO) test -run '^$$' -bench Cluster -benchtime 10000x ./replication

# make bench-scale: the settings of scripts/scale-bench.sh pass through the
# environment (SIZES="3 6 12 24" MODES="off real" SHORT=10 LONG=30 CLIENTS=4
# ROUNDS=1 PROFILE=24 OUT=scale-out).
bench-scale: ## CPU per transaction of gTPC-C's whole mix at 3, 6, 12 and 24 groups, without and with the emulated WAN, a CPU profile at 24 (about 15 minutes; scripts/scale-bench.sh)
	bash scripts/scale-bench.sh

proto: ## regenerate the protobuf code (needs protoc: apt-get install protobuf-compiler)
	bash replication/transport/gen.sh
	bash api/gen.sh

docker: ## build the server image flexkv:dev (FROM scratch, static binary); docker compose up -d runs 3x3
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o build/flexkv ./cmd/flexkv
	docker build -t flexkv:dev .

compose-test: ## docker-compose's 3x3 cluster: build, up, gTPC-C load and run with two replicas killed and restarted, check, down (skips without Docker)
	bash scripts/compose-test.sh

# make soak: DURATION (default 1h) of the whole mix, the samples into OUT
# (default soak-out); defaults of its own, since other targets read the
# same names.
soak: ## the local 3x3 cluster under the whole mix for DURATION (1h): RSS and disk each minute into OUT/samples.csv (OUT=soak-out), and a verdict
	DURATION=$(or $(DURATION),1h) OUT=$(or $(OUT),soak-out) bash scripts/soak.sh

ci: ## what CI runs: .ci/run
	bash .ci/run
