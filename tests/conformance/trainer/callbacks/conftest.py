"""Strict xfail marks for the ported Lightning callback/logger/tuner cases fabricx does not pass (see README.md)."""

from __future__ import annotations

import pytest
from expected_failures import EXPECTED_FAILURES, SLOW


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "trainer/callbacks/" not in item.nodeid:
            continue
        key = item.nodeid.split("trainer/callbacks/", 1)[1]
        base = key.split("[", 1)[0]
        reason = EXPECTED_FAILURES.get(key) or EXPECTED_FAILURES.get(base)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        if key in SLOW or base in SLOW:
            item.add_marker(pytest.mark.slow)
