"""Suite-wide fixtures: every test starts from the environment variables the suite started with."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _restore_environment_variables():
    # seed_everything exports PL_GLOBAL_SEED (and fabricx's own variable), launchers export ranks and ports;
    # a value left by one test would change what a later one sees.
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
