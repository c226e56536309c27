"""Real code built on Lightning, its own tests run once on Lightning and once on fabricx (through the alias).

Every case that passes on Lightning must pass on fabricx, or be listed in `known_differences` (a strict xfail
there). The fast suite runs a small sample of each client on fabricx; the full runs on both are ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.client_plugin import LIGHTNING_IMPORTED
from tests.clients.clients import CLIENTS, Client, run_client
from tests.clients.known_differences import KNOWN_DIFFERENCES


def _run_on_fabricx(client: Client, selection: tuple[str, ...], tmp_path: Path, timeout: float) -> dict[str, str]:
    fabricx = run_client(client, "fabricx", selection, tmp_path / "fabricx.json", timeout)
    assert fabricx.pop(LIGHTNING_IMPORTED) == "passed", f"{client.folder} imported Lightning itself under the alias"
    return fabricx


def _compare(client: Client, selection: tuple[str, ...], tmp_path: Path, timeout: float) -> None:
    lightning = run_client(client, "lightning", selection, tmp_path / "lightning.json", timeout)
    fabricx = _run_on_fabricx(client, selection, tmp_path, timeout)
    passed = sorted(case for case, outcome in lightning.items() if outcome == "passed")
    assert passed, f"no case of {client.folder} passes on Lightning: {lightning}"
    broken = {case: fabricx.get(case, "not run") for case in passed if fabricx.get(case) not in ("passed", "xfailed")}
    stale = sorted(set(KNOWN_DIFFERENCES.get(client.folder, {})) & {c for c, o in lightning.items() if o != "passed"})
    fabricx_passes = sum(fabricx.get(case) == "passed" for case in passed)
    print(f"{client.folder}: Lightning passes {len(passed)}, fabricx passes {fabricx_passes}")
    assert not broken, f"{client.folder}: pass on Lightning, not on fabricx: {broken}"
    assert not stale, f"{client.folder}: listed as known differences but not passing on Lightning: {stale}"


@pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.folder)
def test_client_sample_on_fabricx(client: Client, tmp_path: Path) -> None:
    # The sample is cases that pass on Lightning (`test_client_suite` checks that); running it on fabricx only
    # keeps the fast suite fast.
    fabricx = _run_on_fabricx(client, client.fast, tmp_path, timeout=240)
    assert set(fabricx) == set(client.fast), f"{client.folder}: the sample ran {sorted(fabricx)}"
    failing = {case: outcome for case, outcome in fabricx.items() if outcome not in ("passed", "xfailed")}
    assert not failing, f"{client.folder}: sample cases not passing on fabricx: {failing}"


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.folder)
def test_client_suite(client: Client, tmp_path: Path) -> None:
    _compare(client, client.tests, tmp_path, timeout=1500)
