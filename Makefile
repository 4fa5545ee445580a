# hami-py developer entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Every vendor package, plus the third-party example plugin (installed like a user would install theirs).
PLUGIN_DIRS := $(sort $(dir $(wildcard plugins/*/pyproject.toml))) examples/hami-example-vendor/
STAMP  := $(VENV)/.installed

.PHONY: setup test lint demo bench clean image docs soak

setup: $(STAMP)

# Reinstall when any distribution's metadata changes (new plugin, new dependency).
$(STAMP): pyproject.toml $(wildcard plugins/*/pyproject.toml) examples/hami-example-vendor/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]' \
		$(foreach p,$(PLUGIN_DIRS),-e '$(p:/=)[test]')
	touch $@

lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest

# The long reliability soak (tests marked `soak`: 2,000 pods over real HTTP, chaos); see docs/reliability.md.
soak: setup
	$(BIN)/pytest -m soak tests/reliability

demo: setup
	$(BIN)/hami simulate

bench: setup
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

# Container image (needs a Docker engine): make image IMAGE=registry/hami-py:tag PLUGINS="nvidia metax"
IMAGE   ?= hami-py:latest
PLUGINS ?= all
image:
	docker build --build-arg PLUGINS="$(PLUGINS)" -t $(IMAGE) .

# Static documentation site from docs/ (mkdocs.yml) into site/.
docs: setup
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) build *.egg-info plugins/*/*.egg-info .pytest_cache .ruff_cache
