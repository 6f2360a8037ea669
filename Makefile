# `make demo` and `make test` set everything up from a fresh clone (a .venv here) and run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
STAMP := $(VENV)/.installed

.PHONY: demo test test-all install clean

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, from the pinned CPU build; the constraints file keeps every later
	# install (avalanche-lib pulls torchvision) from replacing it with a CUDA build.
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt -e ".[test]"
	# Let torchvision import when its compiled ops cannot load (see
	# avalanche_tmc_torchvision_fallback.py); a no-op on a normal install.
	$(PY) -c "import site, sys; open(site.getsitepackages()[0] + '/avalanche_tmc_torchvision_fallback.pth', 'w').write('import avalanche_tmc_torchvision_fallback as f; f.install()\n')"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.digits_demo

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

test-all: $(STAMP)
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info
