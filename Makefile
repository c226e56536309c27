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

.PHONY: demo test lint typecheck docs bench bench-tools gpu-wheels gpu-check clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	@# pip >= 25 shows the build backend's warnings even with -q: setuptools' "Editable installation" note is
	@# not the user's to act on.
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e ".[dev,examples,tensorboard,docs,deepspeed]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/digits_trainer.py --max-epochs 3 --root-dir demo_runs

lint: $(STAMP) typecheck
	$(VENV)/bin/ruff check .

# pyright (basic, configured in pyproject) over fabricx/: part of lint, so of make test.
typecheck: $(STAMP)
	$(VENV)/bin/pyright --pythonpath $(PY)

# NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner is nothing a reader of this project can act on.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

test: $(STAMP) lint docs
	$(PY) -m pytest -m "not slow" -q --durations=15

# The instruction counts of the overhead benchmarks need valgrind (a Debian package): `make bench-tools` as root.
bench: $(STAMP)
	@command -v valgrind >/dev/null || echo "valgrind not found: instruction counts will say 'not available' (make bench-tools)"
	$(PY) -m benchmarks

bench-tools:
	apt-get update && apt-get install -y valgrind

# The GPU check (docs/guides/performance.md). `make gpu-wheels` here, with network: the extra wheels the GPU
# machine lacks, into .cache/gpu-wheels. `make gpu-check` there, offline: installs them (when the folder came
# along) into .cache/gpu-site, outside the machine's own packages, puts that and this checkout on PYTHONPATH
# (no build needed) and runs the check; exit code 1 on any failure.
GPU_PYTHON ?= python3
GPU_WHEELS ?= .cache/gpu-wheels
GPU_SITE ?= .cache/gpu-site
GPU_OUT ?= benchmarks/results/gpu
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: -d $(GPU_WHEELS) \
		-r benchmarks/gpu_requirements.txt
	@du -sh $(GPU_WHEELS)

gpu-check:
	@if [ -d "$(GPU_WHEELS)" ]; then $(GPU_PYTHON) -m pip install -q --no-index --no-deps --upgrade \
		--find-links "$(GPU_WHEELS)" --target "$(GPU_SITE)" -r benchmarks/gpu_requirements.txt; fi
	PYTHONPATH=$(CURDIR):$(CURDIR)/$(GPU_SITE) $(GPU_PYTHON) -m benchmarks.gpu_check --out "$(GPU_OUT)" $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) site .cache demo_runs
