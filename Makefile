# Flotilla. `make demo` and `make test` are the two commands of the README.
SHELL := /usr/bin/env bash
BIN := $(CURDIR)/bin
GO ?= go
SANDBOX_DIR ?= $(CURDIR)/.sandbox/demo
TEST_TIMEOUT ?= 60m
# End-to-end tests run this many at once (t.Parallel; each owns its
# sandbox): two at a time took 1,418 s instead of 1,923 s on one day
# (docs/sandbox.md);
# make test E2E_PARALLEL=1 runs them one at a time, to tell whether a test
# that fails only races its neighbour.
E2E_PARALLEL ?= 2

.PHONY: all generate tools tools-demo tools-versions verify build build-schedulers test test-versions test-short test-unit test-e2e test-monitoring demo demo-down bench bench-mesh bench-sweep chaos chaos-planted scenarios scenarios-planted vet clean

all: build

## generate: deepcopy code and CRD manifests (config/crd) from api/v1alpha1, and the agent's RBAC (config/rbac) from the +kubebuilder:rbac markers, with controller-gen
generate:
	hack/tools.sh controller-gen
	$(BIN)/controller-gen object paths=./api/... crd:crdVersions=v1 output:crd:dir=config/crd
	$(BIN)/controller-gen rbac:roleName=flotilla-agent paths=./pkg/... output:rbac:dir=config/rbac
	rm -f charts/flotilla/crds/*.yaml && cp config/crd/*.yaml charts/flotilla/crds/
	cp config/rbac/role.yaml charts/flotilla/files/agent-rbac.yaml

## tools: build the pinned etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, helm, controller-gen, promtool and staticcheck into ./bin
tools:
	hack/tools.sh

## tools-demo: build only what make demo runs: etcd, kube-apiserver, kube-controller-manager, kubectl, kwok and helm
tools-demo:
	hack/tools.sh demo

## verify: gofmt, go vet, staticcheck (checks in staticcheck.conf), generated code, CRDs and RBAC current, go.mod tidy; CI runs it before the tests
verify:
	hack/tools.sh controller-gen staticcheck
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "verify: not gofmt'd:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	$(MAKE) --no-print-directory generate
	@git diff --exit-code -- api config charts/flotilla/crds charts/flotilla/files || { echo "verify: generated files are stale: run make generate and commit them"; exit 1; }
	$(GO) mod tidy
	@set -e; for m in $(SCHEDULER_MINORS); do $(GO) mod tidy -modfile=hack/k8s/v$$m.mod; done
	@git diff --exit-code -- go.mod go.sum hack/k8s || { echo "verify: go.mod, go.sum or hack/k8s/*.mod is not tidy: run go mod tidy (and go mod tidy -modfile=hack/k8s/v<minor>.mod) and commit them"; exit 1; }
	@bad="$$(awk '/^func Test[A-Za-z0-9_]*\(t \*testing\.T\) \{$$/ { name = $$2; sub(/\(.*/, "", name); getline; if ($$0 != "\tt.Parallel()") print FILENAME ": " name }' test/e2e/*_test.go)"; \
		if [ -n "$$bad" ]; then echo "verify: e2e tests must call t.Parallel() first (each owns its sandbox; see docs/sandbox.md):"; echo "$$bad"; exit 1; fi

## build: build flotilla-agent, flotilla-scheduler, flotilla-sandbox and kubectl-flotilla into ./bin
build:
	$(GO) build -o $(BIN)/flotilla-agent ./cmd/agent
	$(GO) build -o $(BIN)/flotilla-scheduler ./cmd/scheduler
	$(GO) build -o $(BIN)/flotilla-sandbox ./hack/sandbox
	$(GO) build -o $(BIN)/kubectl-flotilla ./cmd/kubectl-flotilla

# The scheduler's older minors (SCHEDULER_MINORS), each from hack/k8s/v<minor>.mod:
# the same source tree against that minor's k8s.io/kubernetes and client-go.
# A new minor is named here, in hack/tools.sh (OLDER_K8S_VERSIONS), in the
# chart's flotilla.schedulerMinor and in test/sandbox (KubernetesVersion).
SCHEDULER_MINORS := 1.35 1.36

## build-schedulers: Flotilla's scheduler for each older supported minor (bin/flotilla-scheduler-1.35, -1.36); make build's flotilla-scheduler is the current minor's
build-schedulers:
	@set -e; for m in $(SCHEDULER_MINORS); do \
		echo "$(GO) build -modfile=hack/k8s/v$$m.mod -o $(BIN)/flotilla-scheduler-$$m ./cmd/scheduler"; \
		$(GO) build -modfile=hack/k8s/v$$m.mod -o $(BIN)/flotilla-scheduler-$$m ./cmd/scheduler; \
	done

## tools-versions: the control planes of the older minors a fleet may mix (bin/1.35/, bin/1.36/), for make test-versions
tools-versions:
	hack/tools.sh versions

## test-versions: fleets of mixed minors (a source of 1.37, 1.35 and 1.36 in turn, each with targets of the two other minors): placement through invitations, a gang, a target lost; not part of make test (docs/operations.md#kubernetes-versions)
test-versions: tools tools-versions build build-schedulers
	$(GO) test -count=1 -p 1 -tags versions -timeout $(TEST_TIMEOUT) -run TestMixedMinors ./test/e2e

vet:
	$(GO) vet ./...

## test: unit tests, then the integration and e2e tests on sandbox clusters
test: tools build vet test-unit test-e2e

test-unit:
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/)

# One end-to-end test per feature: the demo's journey (placement,
# invitations, policy, gangs), a gang's all or nothing, invitations, the
# policy, the kubelet API, quotas, tenants, the chart, local-first, the
# on-demand/spot split, targets of one cluster, the agent killed mid-election.
SHORT_E2E ?= TestJourney$$|TestGangAllOrNothing$$|TestInvitation$$|TestPlacementPolicy$$|TestKubelet$$|TestQuota$$|TestTenantBorrowsNothing$$|TestChart$$|TestLocalFirst$$|TestCapacitySplit$$|TestTargetsOfOneClusterPlaceEachPodOnce$$|TestAgentKilledBetweenElectionAndAllowance$$

## test-short: the inner loop: unit tests, the monitoring checks and one end-to-end test per feature (SHORT_E2E)
test-short: tools build test-unit
	$(GO) test -count=1 ./test/monitoring
	$(GO) test -count=1 -p 1 -parallel $(E2E_PARALLEL) -timeout $(TEST_TIMEOUT) -run '$(SHORT_E2E)' ./test/e2e

## test-monitoring: the chart's monitoring parts alone, in seconds, without a sandbox: promtool's check and unit tests of the alerts, the rendered ServiceMonitors, PrometheusRule and dashboard (make test runs them with test/...)
test-monitoring: tools
	$(GO) test -count=1 ./test/monitoring

# Sandbox tests start real control planes, two sandboxes at a time: first
# the packages other than test/e2e two at a time, each running its tests
# one after another (the longest, scenarios and chaos, listed first so
# they overlap); then test/e2e, E2E_PARALLEL tests at a time. Port slots
# (test/sandbox) keep the ports of two test processes apart.
SANDBOX_PKGS = ./test/scenario ./test/chaos $$($(GO) list ./test/... | grep -v -e '/test/e2e$$' -e '/test/scenario$$' -e '/test/chaos$$')
test-e2e:
	$(GO) test -count=1 -p 2 -timeout $(TEST_TIMEOUT) $(SANDBOX_PKGS)
	$(GO) test -count=1 -p 1 -parallel $(E2E_PARALLEL) -timeout $(TEST_TIMEOUT) ./test/e2e

FUZZTIME ?= 30s
FUZZ_FLAGS ?= -parallel 1

## fuzz: run every Fuzz target of pkg/ for $(FUZZTIME), one after another (see docs/reliability.md); make test-unit replays their corpora
fuzz:
	@set -e; for pkg in $$($(GO) list ./pkg/...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $(FUZZ_FLAGS); \
		done; \
	done

BENCH_FLAGS ?= -targets 3 -nodes 4 -pods 200

## bench: one burst of pods through Flotilla and through plain kube-scheduler, side by side, each cluster in a CPU cgroup of 0.45 cores, twice: every process of a cluster in its cgroup, then its control plane alone (needs root and a cpu controller; BENCH_FLAGS="... -shape all" runs the first only, "-cpu-per-cluster 0" uncapped; see docs/benchmarks.md)
bench: tools build
	$(GO) run ./test/bench $(BENCH_FLAGS)

## bench-mesh: N=3 clusters, each the source of a burst and a target of the others, against one baseline cluster and the same clusters alone, 0.45 cores each (see docs/benchmarks.md, "Mesh"); BENCH_FLAGS as for bench
bench-mesh: tools build
	$(GO) run ./test/bench -mesh 3 $(BENCH_FLAGS)

## bench-sweep: K = 1, 3, 6, 10 targets × P = 100, 1000 pods, tables in bench-results/, charts in docs/img/
bench-sweep: tools build
	hack/bench-sweep.sh bench-results

CHAOS_DURATION ?= 20m

## chaos: the long chaos run (test/chaos, docs/reliability.md): $(CHAOS_DURATION) of workload and faults on three clusters, then the checks; FLOTILLA_CHAOS_SEED=<seed> replays a run
chaos: tools build
	FLOTILLA_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -count=1 -v -timeout 90m -run 'TestChaos$$' ./test/chaos

## chaos-planted: a short chaos run with an agent built with a planted election bug, which the checker must catch
chaos-planted: tools build
	FLOTILLA_CHAOS_PLANTED=1 $(GO) test -count=1 -v -timeout 30m -run 'TestChaosPlantedBug$$' ./test/chaos

SEEDS ?= 1 2 3
SCENARIO_PHASES ?= 5
GANG_SEEDS ?= 1 2 3 5 6

## scenarios: the differential scenario tests (test/scenario, docs/reliability.md "Scenarios"): each seed of SEEDS draws a fleet and a script of SCENARIO_PHASES phases, run through Flotilla and, on an oracle cluster, through plain kube-scheduler; each seed of GANG_SEEDS draws a fleet and gangs, placed by Flotilla and by kube-scheduler's own gang scheduling; a failing seed prints its fleet and script
scenarios: tools build
	FLOTILLA_SCENARIO_SEEDS="$(SEEDS)" FLOTILLA_SCENARIO_PHASES=$(SCENARIO_PHASES) FLOTILLA_GANG_SEEDS="$(GANG_SEEDS)" $(GO) test -count=1 -v -timeout 180m -run 'TestScenarioSeeds$$|TestGangsAgainstKubeScheduler$$' ./test/scenario

PLANTED_SEED ?=

## scenarios-planted: one scenario with an agent built with -tags flotilla_planted_unjudged (elections without the placement policy), whose skew the checker must catch; PLANTED_SEED=<seed> runs another seed than the test's own
scenarios-planted: tools build
	FLOTILLA_SCENARIO_PLANTED=1 FLOTILLA_SCENARIO_SEEDS="$(PLANTED_SEED)" $(GO) test -count=1 -v -timeout 30m -run 'TestScenarioPlanted' ./test/scenario

## demo: start three sandbox clusters, show Flotilla at work, leave them running
demo: tools-demo build
	$(BIN)/flotilla-sandbox up --dir $(SANDBOX_DIR)
	$(GO) run ./hack/demo --dir $(SANDBOX_DIR)

## demo-down: stop the demo clusters
demo-down:
	@if [ -x $(BIN)/flotilla-sandbox ]; then $(BIN)/flotilla-sandbox down --dir $(SANDBOX_DIR); fi

clean: demo-down
	rm -rf $(BIN) .sandbox
