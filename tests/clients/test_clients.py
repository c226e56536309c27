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


def _require(client: Client) -> None:
    if client.missing:
        # The clients' packages are not in the project's test dependencies: one (rootutils) installs a top-level
        # `tests` package that would shadow this suite's, another pulls a CUDA torchvision. `make clients` installs
        # them into a virtual environment of their own (README.md).
        pytest.skip(f"{client.folder} needs {', '.join(client.missing)}: run `make clients` (tests/clients/README.md)")


def _run_on_fabricx(client: Client, selection: tuple[str, ...], tmp_path: Path, timeout: float) -> dict[str, str]:
    fabricx = run_client(client, "fabricx", selection, tmp_path / "fabricx.json", timeout)
    assert fabricx.pop(LIGHTNING_IMPORTED) == "passed", f"{client.folder} imported Lightning itself under the alias"
    return fabricx


def _compare(client: Client, selection: tuple[str, ...], tmp_path: Path, timeout: float) -> None:
    lightning = run_client(client, "lightning", selection, tmp_path / "lightning.json", timeout)
    fabricx = _run_on_fabricx(client, selection, tmp_path, timeout)
    passed = sorted(case for case, outcome in lightning.items() if outcome == "passed")
    assert passed, f"no case of {client.folder} passes on Lightning: {lightning}"
    known = KNOWN_DIFFERENCES.get(client.folder, {})
    # A known difference may fail before pytest can mark it (an import error at collection); strict either way.
    broken = {
        c: fabricx.get(c, "not run") for c in passed if fabricx.get(c) not in ("passed", "xfailed") and c not in known
    }
    fixed = sorted(case for case in known if fabricx.get(case) == "passed")
    stale = sorted(case for case in known if lightning.get(case) != "passed")
    fabricx_passes = sum(fabricx.get(case) == "passed" for case in passed)
    print(f"{client.folder}: Lightning passes {len(passed)}, fabricx passes {fabricx_passes}")
    assert not broken, f"{client.folder}: pass on Lightning, not on fabricx: {broken}"
    assert not fixed, f"{client.folder}: known differences that now pass on fabricx (remove them): {fixed}"
    assert not stale, f"{client.folder}: known differences that do not pass on Lightning: {stale}"


@pytest.mark.parametrize("client", [c for c in CLIENTS if c.fast], ids=lambda client: client.folder)
def test_client_sample_on_fabricx(client: Client, tmp_path: Path) -> None:
    # The sample is cases that pass on Lightning (`test_client_suite` checks that); running it on fabricx only
    # keeps the fast suite fast.
    _require(client)
    fabricx = _run_on_fabricx(client, client.fast, tmp_path, timeout=240)
    assert set(fabricx) == set(client.fast), f"{client.folder}: the sample ran {sorted(fabricx)}"
    failing = {case: outcome for case, outcome in fabricx.items() if outcome not in ("passed", "xfailed")}
    assert not failing, f"{client.folder}: sample cases not passing on fabricx: {failing}"


@pytest.mark.slow
@pytest.mark.timeout(2 * 1500 + 60)  # two runs of up to 1500 s each (gluonts takes about 12 min), not the suite's 300 s
@pytest.mark.parametrize("client", CLIENTS, ids=lambda client: client.folder)
def test_client_suite(client: Client, tmp_path: Path) -> None:
    _require(client)
    _compare(client, client.tests, tmp_path, timeout=1500)
