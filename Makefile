# `make demo` and `make test` do all set-up on a fresh machine with only Python 3.10+.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; override on a GPU machine, e.g. `make test TORCH_SPEC=torch`.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.fabricx-installed
export DS_BUILD_OPS ?= 0
export DS_ACCELERATOR ?= cpu
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.cache/torch_extensions

.PHONY: demo test lint typecheck docs bench clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,examples,tensorboard,docs,deepspeed]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/digits_trainer.py --max-epochs 3 --root-dir demo_runs

lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check .

# pyright (basic, configured in pyproject) over fabricx/: part of lint, so of make test.
typecheck: $(STAMP)
	$(VENV)/bin/pyright --pythonpath $(PY)

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

test: $(STAMP) lint docs
	$(PY) -m pytest -m "not slow" -q --durations=15

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) site .cache demo_runs
