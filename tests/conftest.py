"""Suite-wide fixtures: every test starts from the environment variables the suite started with."""

from __future__ import annotations

import os

import pytest

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
