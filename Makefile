# trainyard: `make run` (the main job) and `make test`. Both bootstrap .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.trainyard-installed
# Horovod is built from its patched sdist (not on the "all" extra); the wheel is cached.
HOROVOD_STAMP := $(VENV)/.horovod-installed
# Test modules run in parallel on 3 xdist workers (one local Ray each): most of a test's
# time is spent waiting on processes and services, so 3 fill 2 cores. A module stays on
# one worker (loadfile), so its module fixtures are built once. PYTEST_XDIST= runs
# serially; PYTEST_ARGS adds to it (e.g. PYTEST_ARGS="tests/unit -x"). Not loadgroup:
# with pytest 9.2, xdist 3.8's loadgroup ignores xdist_group marks (tests/README.md).
PYTEST_XDIST ?= -n 3 --dist loadfile --no-loadscope-reorder
PYTEST_ARGS ?=
# The project's own modules compiled to bytecode first (__pycache__/, ignored by git).
# Where PYTHONDONTWRITEBYTECODE is set (the development VM sets it) Python never writes
# it, so every process that imports engine, tasks or a test module (each Ray worker:
# thousands in a test run) compiled the same sources again: `import ray` and the
# worker's modules took 0.68–0.80 CPU-s without bytecode, 0.63–0.69 with.
# compileall writes only what is stale: a fraction of a second after the first time.
PYC_DIRS := engine tasks flows dags pipelines tests bench examples scripts
COMPILE := $(PY) -m compileall -q -j 0 $(PYC_DIRS) > /dev/null
# The docs site (mkdocs.yml); Material's banner about its successor is not the build's output.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

.PHONY: run test docs bench venv constraints clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -c constraints.txt -e ".[all,test]"
	@touch $(STAMP)

$(HOROVOD_STAMP): $(STAMP) scripts/install_horovod.sh
	bash scripts/install_horovod.sh $(PY)
	@touch $(HOROVOD_STAMP)

venv: $(STAMP)

run: $(STAMP)
	@$(COMPILE)
	$(PY) -m flows.retrain

# The layer contracts ([tool.importlinter] in pyproject.toml) first: seconds, no Ray.
# Then the docs site, --strict: a broken link, anchor or API reference fails the suite
# (built into a temporary directory, so that site/ stays what `make docs` last built).
test: $(STAMP) $(HOROVOD_STAMP)
	$(VENV)/bin/lint-imports
	@site=$$(mktemp -d) && $(MKDOCS) build --strict --quiet -d "$$site"; \
		rc=$$?; rm -rf "$$site"; exit $$rc
	@$(COMPILE)
	$(PY) -m pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

# The docs site (mkdocs.yml) into site/ (ignored by git).
docs: $(STAMP)
	$(MKDOCS) build --strict -d site

bench: $(STAMP) $(HOROVOD_STAMP)
	$(PY) -m bench.run $(if $(QUICK),--quick,)

constraints:
	$(PY) -m pip freeze --exclude-editable | sed 's/+cpu//' | grep -vi '^trainyard' > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache site
