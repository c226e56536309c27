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

.PHONY: demo test lint typecheck docs bench bench-tools gpu-wheels gpu-check clients clean

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
# Its output is kept in site-build.log: `make test` hands the built site and the log to the docs tests.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site > site-build.log 2>&1; \
	status=$$?; cat site-build.log; exit $$status

# One pytest worker per core (2 on the CI machine); a test file stays on one worker, so its module fixtures run once.
TEST_WORKERS ?= 2
test: $(STAMP) clients lint docs
	FABRICX_BUILT_SITE=site FABRICX_BUILT_SITE_LOG=site-build.log $(PY) -m pytest -m "not slow" -q --durations=15 -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

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

# The clients' packages (tests/clients/README.md), into a folder of their own that only the clients' runs see:
# some of them ship top-level folders (tests, docs) that would shadow this project's, and their own dependency
# pins would replace torch, lightning or pandas. Without them the clients' tests skip. With --no-deps a pinned
# package's own dependencies are listed here when the project's environment lacks them (wandb 0.28's sentry-sdk:
# newer wandb releases, which the project's environment gets, no longer bring it).
CLIENTS_SITE ?= .cache/clients-site
clients: $(CLIENTS_SITE)/.installed
$(CLIENTS_SITE)/.installed: $(STAMP) Makefile
	$(PY) -m pip install -q --no-deps --target $(CLIENTS_SITE) hydra-core "omegaconf<2.4" \
		"antlr4-python3-runtime==4.9.3" hydra-colorlog colorlog rootutils python-dotenv "lightly==1.6.0" \
		lightly-utils aenum "pytorch-forecasting==1.8.0" "scikit-base<1.1" "gluonts==0.17.0" toolz pytest-mock \
		"nn-template-core==0.4.0" "anypy==0.0.6" "datasets==5.2.0" "dill==0.4.1" "multiprocess==0.70.19" \
		"wandb==0.28.2" "sentry-sdk==2.76.0"
	rm -rf $(CLIENTS_SITE)/tests $(CLIENTS_SITE)/docs $(CLIENTS_SITE)/examples $(CLIENTS_SITE)/extension_templates
	touch $@

clean:
	rm -rf $(VENV) site site-build.log .cache demo_runs
