# `make demo` and `make test` install into .venv first (torch's CPU wheel before the rest).
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	touch $@

.PHONY: install demo test bench
install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/air-data demo

test: $(VENV)/.installed
	$(PY) -m pytest

bench: $(VENV)/.installed
	TMPDIR=/dev/shm $(PY) benchmarks/run_all.py
