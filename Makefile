# `make demo` and `make test` set everything up from a fresh clone (a .venv here) and run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
EMOJI_PREFIX := $(HOME)/.cache/avalanche_tmc/emoji
EMOJI_SETS := @iconify-json/twemoji @iconify-json/openmoji @iconify-json/noto \
              @iconify-json/fluent-emoji-flat @iconify-json/fluent-emoji-high-contrast
# Two cores and another busy process make OpenMP's spin-waiting threads 10-100x slower.
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: demo test test-e2e test-all gpu-check lint digits base install data docs clean

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, from the pinned CPU build; the constraints file keeps every later
	# install (avalanche-lib pulls torchvision) from replacing it with a CUDA build.
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt -e ".[test,benchmarks]"
	$(PIP) install -c constraints.txt --no-deps animal-mnist
	# Let torchvision import when its compiled ops cannot load (see
	# avalanche_tmc_torchvision_fallback.py); a no-op on a normal install. The wheel ships
	# this .pth (setup.py); an editable install does not, so it is written here.
	$(PY) -c "import site; open(site.getsitepackages()[0] + '/avalanche_tmc_torchvision_fallback.pth', 'w').write('import avalanche_tmc_torchvision_fallback as f; f.install()\n')"
	touch $(STAMP)

install: $(STAMP) data

# Offline datasets from the Debian and npm registries (nothing from a dataset hub).
data: /usr/share/datasets/fashion-mnist $(EMOJI_PREFIX)/node_modules/@iconify-json/noto/icons.json

/usr/share/datasets/fashion-mnist:
	if [ "$$(id -u)" = 0 ]; then (apt-get update -qq || true) && apt-get install -y -qq dataset-fashion-mnist; \
	else echo "Fashion-MNIST missing: run 'sudo apt-get install dataset-fashion-mnist'"; exit 1; fi

$(EMOJI_PREFIX)/node_modules/@iconify-json/noto/icons.json:
	npm install --silent --prefix $(EMOJI_PREFIX) --no-audit --no-fund $(EMOJI_SETS)

# The main job: the offline class-, task- and data-incremental comparison at 64 px, where
# the premise map found the paper's premise met, 5 seeds (the per-method seconds of a run
# are in results/offline/results.md; 30-60 min on the 2-core machines that made the
# committed table: see docs/results.md).
demo: install
	$(PY) -m benchmarks.run --preset offline

# The small digits example of the library alone (about a minute).
digits: $(STAMP)
	$(PY) -m examples.digits_demo

# The premise map's project-pretrained base (docs/premise-map.md): Lite0 fine-tuned on
# Fashion-MNIST, built once into the cache (about 10 min on 2 cores), never downloaded.
base: $(STAMP)
	$(PY) -m benchmarks.networks.pretrain_base

# The linter alone (ruff, configured in pyproject.toml; make test runs it first).
lint: $(STAMP)
	$(PY) -m ruff check .

# The tests in two tiers (docs/tests.md): `make test`, the linter and every test but the
# second tier, in two processes (pytest-xdist); `make test-e2e`, what must run whole (the
# clean install and the wheel, the command line and the examples in their own processes,
# torchrun, the runner and the experiments end to end, the documentation site). Each run
# prints its 20 slowest tests; a test past its time limit (pytest-timeout) fails.
# Each tier's JUnit report stays in .venv/reports: `python -m benchmarks.results.suite_costs --tier fast
# .venv/reports/fast.xml --tier e2e .venv/reports/e2e.xml` turns them into the cost table of docs/tests.md.
PYTEST := $(PY) -m pytest -q -n auto --durations=20
REPORTS := $(VENV)/reports
test: install $(DOCS_STAMP)
	$(PY) -m ruff check .
	$(PYTEST) --timeout=300 --junitxml=$(REPORTS)/fast.xml -m "not slow and not integration" tests

# Whole modules per process: their shared fixtures (a wheel, a trained pair of silos) are made once.
test-e2e: install $(DOCS_STAMP)
	$(PYTEST) --timeout=900 --dist loadfile --junitxml=$(REPORTS)/e2e.xml -m "integration and not slow" tests

# Both tiers and the main job end to end (slow: about half an hour more).
test-all: install $(DOCS_STAMP)
	$(PY) -m ruff check .
	$(PYTEST) --timeout=3600 --dist loadfile tests

# The GPU check (docs/tests.md, "On a GPU"): about 8 minutes on one GPU, the report in
# docs/results/gpu/<device>.md; `python -m benchmarks.tools.gpu_check --dry-run` checks it on the CPU.
gpu-check: $(STAMP)
	$(PY) -m benchmarks.tools.gpu_check

# The documentation site in site/: the pages under docs/ (mkdocs.yml lists them) and the API
# reference rendered from the docstrings. Strict: a broken link or anchor, a page missing
# from the navigation or a docstring that does not render fails it (make test runs it).
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(PIP) install -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict
	@echo "site/index.html (API reference: site/api/index.html)"

clean:
	rm -rf $(VENV) *.egg-info build dist site
