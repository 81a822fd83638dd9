# `make demo`, `make test` and `make test-fast` install into .venv first (torch's CPU wheel before the rest).
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $@

.PHONY: install demo test test-fast bench docs docs-serve
install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/air-data demo

test: $(VENV)/.installed
	$(PY) -m pytest

# Pure and single-process tests only: no torchrun, Ray, Spark, Jupyter kernels, DataLoader workers or netvol.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -m "not slow"

bench: $(VENV)/.installed
	$(VENV)/bin/pip install -q "databricks-sdk-air[data]"   # the reference, for side-by-side runs only
	TMPDIR=/dev/shm $(PY) benchmarks/run_all.py

# The documentation site, from docs/ and the docstrings (the `docs` extra, part of `dev`): into site/, or served
# with live reload at http://127.0.0.1:8000.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve
