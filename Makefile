# hami-py developer entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Every vendor package, plus the third-party example plugin (installed like a user would install theirs).
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml))) examples/hami-example-vendor/
STAMP  := $(VENV)/.installed

.PHONY: setup test lint demo bench clean image docs soak e2e e2e-bin bench-e2e manifests chart-version dist version

# The one version: hami_core/__init__.py's __version__ (pyproject.toml reads it; the chart and the image follow it).
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' hami_core/__init__.py)

setup: $(STAMP)

# Reinstall when any distribution's metadata changes (new plugin, new dependency). The core with every
# component's extra (scheduler, node, monitor, sim) and the test tools; each plugin with its own test extra.
$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml) examples/hami-example-vendor/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[all,test]' \
		$(foreach p,$(PLUGIN_DIRS),-e '$(p:/=)[test]')
	touch $@

lint: setup
	$(BIN)/ruff check .

test: lint
	e2e/sysdeps.sh chromium
	$(BIN)/pytest

# The long reliability soak (tests marked `soak`: 2,000 pods over real HTTP, chaos); see docs/reliability.md.
soak: setup
	$(BIN)/pytest -m soak tests/reliability

# The real control plane (kube-apiserver, kube-scheduler, etcd, kubectl) built from their Go modules
# (e2e/controlplane/go.mod) into ~/.cache/hami-e2e/<versions>/, reused when present; the folder is the last line.
# Helm comes from its own module (e2e/helm/go.mod) into ~/.cache/hami-e2e/helm-<version>-<digest>/, so that bumping
# one never rebuilds the other.
E2E_BUILD := e2e/controlplane/build.sh
HELM_BUILD := e2e/helm/build.sh
e2e-bin:
	@$(HELM_BUILD) >&2
	@$(E2E_BUILD)

# The e2e tier: tests/e2e against that control plane (needs Go to build it once; see README).
# e2e/sysdeps.sh installs Debian's prometheus when missing (as root; otherwise it says what to install), which
# tests/e2e/test_prometheus.py drives.
e2e: setup
	@e2e/sysdeps.sh prometheus
	@helm="$$($(HELM_BUILD) | tail -n 1)/helm" && bin="$$($(E2E_BUILD) | tail -n 1)" && test -n "$$bin" && \
		HAMI_HELM="$$helm" HAMI_E2E_BIN="$$bin" HAMI_E2E_REQUIRE=1 $(BIN)/pytest -m e2e tests/e2e $(E2E_ARGS)

# The extender inside the real kube-scheduler: pods/s and latency, alone / null extender / hami (docs/performance.md).
bench-e2e: setup
	@bin="$$($(E2E_BUILD) | tail -n 1)" && test -n "$$bin" && \
		HAMI_E2E_BIN="$$bin" $(BIN)/python benchmarks/bench_e2e.py $(BENCH_ARGS)

demo: setup
	$(BIN)/hami simulate

bench: setup
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

# Container image (needs a Docker engine): make image IMAGE=registry/hami-py:tag PLUGINS="nvidia metax"
IMAGE   ?= hami-py:$(VERSION)
PLUGINS ?= all
image:
	docker build --build-arg PLUGINS="$(PLUGINS)" -t $(IMAGE) .

# Static documentation site from docs/ (mkdocs.yml) into site/.
docs: setup
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

# deploy/ is the chart rendered (tests/chart_helpers.py MANIFESTS; tests/deploy/test_chart.py fails when it is stale).
# Needs helm: $$HAMI_HELM, else the one `make e2e-bin` builds (built here when missing).
manifests: setup chart-version
	@test -n "$$HAMI_HELM" || $(HELM_BUILD) >/dev/null
	$(BIN)/python tests/chart_helpers.py --write

# charts/hami-py/Chart.yaml's version and appVersion are VERSION (a test checks they agree).
chart-version:
	sed -i -e 's/^version: .*/version: $(VERSION)/' -e 's/^appVersion: .*/appVersion: "$(VERSION)"/' \
		charts/hami-py/Chart.yaml

version:
	@echo $(VERSION)

# Every wheel (hami-core, each vendor plugin, the example third-party plugin) into dist/, as the packages would be
# published; `pip install dist/*.whl` installs them without an index (docs/install.md).
dist: setup
	rm -rf dist
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w dist \
		. $(PLUGIN_DIRS:/=)
	@ls dist

clean:
	rm -rf $(VENV) build dist plugins/*/build examples/*/build *.egg-info plugins/*/*.egg-info .pytest_cache .ruff_cache
