"""Suite-wide fixtures: every test starts from the environment variables the suite started with."""

from __future__ import annotations

import os

import pytest

# The files that take longest (each one worker's unit under `--dist loadfile`), longest first, measured with
# `--durations=0`. `make test` hands files to its two workers in collection order (`--no-loadscope-reorder`):
# starting with these leaves short files for the end, so neither worker waits alone on a long file at the close.
LONGEST_FILES = (
    "tests/examples/test_examples_smoke.py",
    "tests/resume/matrix/test_resume_matrix.py",
    "tests/examples/test_benchmarks_entry.py",
    "tests/differential/test_peer_data.py",
    "tests/strategies/test_deepspeed.py",
    "tests/train/test_lightning_differential.py",
    "tests/compat/test_accelerate_seed_tutorial.py",
    "tests/checkpoint/test_ckpt_pipeline_strategies.py",
    "tests/compat/accelerate_suite/test_accelerate_scripts.py",
    "tests/reliability/test_clean_exit.py",
    "tests/data/test_elastic_processes.py",
    "tests/compat/test_accelerate_tutorial.py",
    "tests/train/test_lightning_contracts.py",
    "tests/clients/test_clients.py",
    "tests/checkpoint/test_ckpt_async_crash.py",
    "tests/strategies/test_fsdp.py",
    "tests/train/test_trainer_ddp.py",
    "tests/compat/test_lightning_alias.py",
    "tests/core/test_checkpoint_doors.py",
    "tests/strategies/test_ddp.py",
    "tests/strategies/test_launchers.py",
    "tests/examples/test_documented_commands.py",
    "tests/checkpoint/test_ckpt_crash_sweep.py",
    "tests/utilities/test_lazy_imports_rng.py",
    "tests/core/test_compile.py",
    "tests/compat/test_accelerate_distributed.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    # A stable sort: every other file keeps its place, after these.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    # `make test` runs two workers on two cores: a worker's own tensor work on one thread each, so that idle
    # OpenMP threads of one worker do not spin on the core the other one computes on. Processes a test launches
    # choose their threads as they would anywhere.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _restore_environment_variables():
    # seed_everything exports PL_GLOBAL_SEED (and fabricx's own variable), launchers export ranks and ports;
    # a value left by one test would change what a later one sees.
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
