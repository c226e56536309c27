"""pytest plugin loaded into a client's own test run (`-p client_plugin`): records each case's outcome and, when
``FABRICX_CLIENT_FRAMEWORK=fabricx``, runs the client on fabricx through the opt-in alias.

Under fabricx the alias is enabled when pytest loads this plugin, before the client's conftest or code imports
Lightning, and each case `known_differences` lists becomes a strict xfail with its reason.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

import pytest

FRAMEWORK = os.environ.get("FABRICX_CLIENT_FRAMEWORK", "lightning")

if FRAMEWORK == "fabricx":
    import fabricx.compat.lightning

    fabricx.compat.lightning.enable()

#: The report's entry saying whether Lightning's own modules were imported in a fabricx run ("failed" if so).
LIGHTNING_IMPORTED = "<lightning itself imported>"
_outcomes: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FRAMEWORK != "fabricx":
        return
    from known_differences import KNOWN_DIFFERENCES

    known = KNOWN_DIFFERENCES.get(config.rootpath.name, {})
    for item in items:
        if item.nodeid in known:
            item.add_marker(pytest.mark.xfail(reason=known[item.nodeid], strict=True))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Every case starts from the same seed under both frameworks: a client test that draws random data or
    # weights without seeding (some of gluonts' do) then gives one outcome, not a pass one run and a fail the
    # next, so the two runs compare the frameworks rather than the draws. Likewise every case starts from a
    # collected heap: gluonts' tests abandon prediction generators suspended inside `torch.no_grad()`, which
    # leave gradients off until the garbage collector closes them, so when the next case found them on
    # depended on each framework's allocation counts, not on the framework.
    import gc
    import random

    import numpy as np
    import torch

    gc.collect()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        outcome = "failed"
    elif report.skipped:
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call":
        outcome = "passed"
    else:
        return
    if _outcomes.get(report.nodeid) != "failed":
        _outcomes[report.nodeid] = outcome


def _write_report() -> None:
    # At exit, so that a run pytest ends early (a conftest that fails to import) still reports.
    if FRAMEWORK == "fabricx":
        # Proof that the run was fabricx's: no Lightning module of Lightning's own was imported.
        from fabricx.compat.lightning.finder import loaded_lightning_modules

        _outcomes[LIGHTNING_IMPORTED] = "failed" if loaded_lightning_modules() else "passed"
    path = os.environ.get("FABRICX_CLIENT_REPORT")
    if path:
        Path(path).write_text(json.dumps(_outcomes, indent=1, sort_keys=True))


atexit.register(_write_report)
