# kdist — `make help` lists every target.
SHELL := /bin/bash
PYTHON ?= python3
KDIST_CACHE ?= $(HOME)/.cache/kdist
TORCH ?= torch==2.15.0
export KDIST_CACHE
# /opt/wheels: where a machine may keep a +cpu torch wheel (pip's own config points there too).
export PIP_FIND_LINKS := $(KDIST_CACHE)/wheels /opt/wheels
export PIP_DISABLE_PIP_VERSION_CHECK := 1
KUBECONFIG_E2E ?= $(CURDIR)/.cluster/kubeconfig
STAMP := .install.stamp
# The drills (tests/dist, tests/compat, the cluster suites) time real processes on a
# shared 2-core machine: a drill that fails is run once more, and the summary line says
# "N rerun" and names it (each one a margin to look at, docs/testing.md); one that
# fails twice fails.
# The slowest tests are printed too: what CI time is trimmed by.
DRILL_FLAGS ?= --reruns 1 --reruns-delay 2 -rfER --durations=15
CLI_STAMP := .install-cli.stamp
DEMO_STAMP := .install-demo.stamp

.DEFAULT_GOAL := help
.PHONY: help install install-cli demo test unit lint manifests docs golden e2e image cluster-build cluster-up cluster-down kind-up kind-down e2e-kind bench clean

help: ## List every target with one line
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-13s\033[0m %s\n", $$1, $$2}'

$(KDIST_CACHE)/wheels/.done:
	@mkdir -p $(KDIST_CACHE)/wheels
	@echo "downloading $(TORCH) + numpy wheels into $(KDIST_CACHE)/wheels (once; ~3 GB, a few minutes)"
	$(PYTHON) -m pip download --progress-bar on --dest $(KDIST_CACHE)/wheels "$(TORCH)" numpy
	@touch $@

# The CLI side and the test tools: no torch (lint, manifests and golden need no more).
$(CLI_STAMP): pyproject.toml
	$(PYTHON) -m pip install -q -e '.[test]'
	@touch $@

$(STAMP): pyproject.toml $(CLI_STAMP) $(KDIST_CACHE)/wheels/.done
	$(PYTHON) -m pip install -q -e '.[train,test,compat,plot]' "$(TORCH)"
	@touch $@

# The demo needs the training side only: no test tools, no compat programs.
$(DEMO_STAMP): pyproject.toml $(KDIST_CACHE)/wheels/.done
	$(PYTHON) -m pip install -q -e '.[train]' "$(TORCH)"
	@touch $@

install: $(STAMP) ## Install kdist with its training and test dependencies (torch from a local wheel cache)

install-cli: $(CLI_STAMP) ## Install kdist and the test tools without torch (enough for lint, manifests, docs, golden)

demo: $(DEMO_STAMP) ## Install kdist[train] (in the active virtualenv) and run the built-in 2-rank DDP job here (no cluster needed)
	$(PYTHON) -m kdist run --local

test: install lint ## Lint, layers, types, check manifests/ and the docs are fresh, run unit + fake-API + multi-process tests
	$(PYTHON) -m kdist.rendering.manifests --check
	$(PYTHON) -m kdist.spec.docsgen --check
	@# Unit and fake-API tests mostly wait (subprocesses, sockets): two at once halves them.
	$(PYTHON) -m pytest tests/unit tests/api -q -p no:cacheprovider -n 2
	@# The drills too: their slowest wait for a heartbeat or a hang to be noticed (15:39
	@# two at once against ~25 min one at a time, every test passed, 2026-12-07).
	$(PYTHON) -m pytest tests/dist tests/compat -q -p no:cacheprovider -n 2 $(DRILL_FLAGS)

unit: install ## Unit tests only (no processes, no cluster; seconds)
	$(PYTHON) -m pytest tests/unit -q -p no:cacheprovider

lint: install-cli ## ruff, import layers (import-linter), mypy
	$(PYTHON) -m ruff check kdist tests bench
	$(PYTHON) -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
	$(PYTHON) -m mypy kdist

manifests: install-cli ## Regenerate manifests/ from examples/ and the add-ons
	$(PYTHON) -m kdist.rendering.manifests

docs: install-cli ## Regenerate docs/reference.md and kdist/spec/job.schema.json from the spec model
	$(PYTHON) -m kdist.spec.docsgen

golden: install-cli ## Regenerate tests/unit/golden/ (review the diff!)
	$(PYTHON) -m tests.unit.golden --update

cluster-build: ## Build (once, cached in ~/.cache/kdist) every binary of both test clusters; no root, no cluster
	bash tests/cluster/kind/up.sh --build-only

cluster-up: ## Bring up (or reuse) the single-node test cluster; writes .cluster/kubeconfig
	bash tests/cluster/up.sh

cluster-down: ## Stop the test cluster and clean its mounts, bridge and netns
	bash tests/cluster/down.sh

image: install ## Build the CPU training image and load it into the cluster as kdist-train:dev-cpu
	bash tests/cluster/image.sh

# The suite mostly waits on the cluster (~64% idle CPU run one test at a time):
# E2E_WORKERS tests run at once, each in its own namespace; the `exclusive`
# ones (an API server restart, a lost node, pods that fill the node, the shared
# ClusterQueue's whole quota) run alone afterwards.
E2E_WORKERS ?= 2
# A single node: the 2-node tests run on kind (make e2e-kind) instead of skipping here.
# The Kubeflow SDK (tests/e2e/test_trainjob_sdk.py) pins kubernetes<36, which kdist's own
# does not allow: it gets a venv of its own, made once per version (its stamp inside it).
KUBEFLOW_SDK ?= 0.5.0
SDK_VENV ?= $(KDIST_CACHE)/venv-kubeflow
SDK_STAMP := $(SDK_VENV)/.kubeflow-$(KUBEFLOW_SDK)
E2E_PYTEST = KUBECONFIG=$(KUBECONFIG_E2E) KDIST_SDK_VENV=$(SDK_VENV) \
	$(PYTHON) -m pytest tests/e2e -q -p no:cacheprovider $(DRILL_FLAGS) \
	--ignore=tests/e2e/test_node_loss.py

$(SDK_STAMP):
	rm -rf $(SDK_VENV) && $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/python -m pip install -q "kubeflow==$(KUBEFLOW_SDK)"
	touch $@

e2e: install cluster-up image $(SDK_STAMP) ## cluster-up + image + the e2e suite against .cluster/kubeconfig
	@rc=0; \
	$(E2E_PYTEST) -n $(E2E_WORKERS) -m "not exclusive" || rc=$$?; \
	$(E2E_PYTEST) -m exclusive || rc=$$?; \
	exit $$rc

KIND_STATE := $(CURDIR)/.cluster-kind
# What needs two nodes: pods of one job on both, the node-loss drills; and kdist's
# shipped runtime on the nodes' image without kdist (Debian's torch, Python 3.14).
E2E_KIND_TESTS ?= tests/e2e/test_node_loss.py tests/e2e/test_spares.py tests/e2e/test_elastic.py \
	tests/e2e/test_shipped_runtime.py::test_kdists_ddp_trains_on_an_image_without_kdist

kind-up: ## Bring up (or reuse) the offline 2-node kind cluster with its training image (Debian's torch); writes .cluster-kind/kubeconfig
	bash tests/cluster/kind/up.sh

kind-down: ## Delete the kind cluster, its network and its dockerd
	bash tests/cluster/kind/down.sh

e2e-kind: install kind-up ## kind-up + E2E_KIND_TESTS (default: the 2-node tests) on 2-node kind, then tests/dist in its nodes' image (Debian's torch, Python 3.14)
	@rc=0; \
	KUBECONFIG=$(KIND_STATE)/kubeconfig KDIST_CLUSTER_LOGS=$(KIND_STATE)/logs \
	KDIST_KIND_DOCKER_HOST=unix://$(KIND_STATE)/run/docker.sock \
	KDIST_E2E_SHARED_DIR=$(KIND_STATE)/shared TMPDIR=$(KIND_STATE)/shared \
	$(PYTHON) -m pytest $(E2E_KIND_TESTS) -q -p no:cacheprovider $(DRILL_FLAGS) || rc=$$?; \
	bash tests/cluster/kind/dist.sh || rc=$$?; \
	exit $$rc

bench: install ## Benchmarks: writes bench/results.json and the table in bench/README.md
	$(PYTHON) -m bench.run

clean: ## Remove local build outputs (not the cluster or the wheel cache)
	rm -rf build dist *.egg-info $(STAMP) $(CLI_STAMP) $(DEMO_STAMP) .pytest_cache .ruff_cache .mypy_cache
