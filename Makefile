# Fresh-machine entry points: `make train` (main job) and `make test` (test suite).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: setup setup-test train test lint check-kernels

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[cuda]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test

train: setup
	$(PY) -m flashgnn train --config configs/gcn-synthetic-small.yaml

test: setup-test
	$(PY) -m pytest -q

lint: setup-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

check-kernels: setup
	$(PY) -m flashgnn.cuda --check --arch sm_80,sm_90
