"""Lightning's Trainer tests (``tests/tests_pytorch`` at 2.6.5) run against fabricx: the selection rule is in
README.md and ``port.py``; this file provides the fixtures Lightning's conftest provides and marks the cases.

* A case runs only if it passes on Lightning itself (``lightning_passing.txt``, written by
  ``update_gaps.py --lightning``); the others are deselected: they are not Lightning's specification here.
* A case listed in ``known_gaps.KNOWN_GAPS`` is a strict xfail with the reason given there: when fabricx starts
  passing it, the run says so and the entry must go (``update_gaps.py --write`` regenerates the table).
  ``FABRICX_CONFORMANCE_NO_GAPS=1`` runs without the table.
* Files in ``SLOW_FILES`` and cases in ``slow_cases.SLOW_CASES`` are marked ``slow`` (outside the default suite).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
import torch.distributed

_HERE = Path(__file__).parent

# Whole files kept out of the default suite for their running time (run them with `-m slow`).
SLOW_FILES: set[str] = set()


from port import FILES  # noqa: E402  (this folder is on sys.path, as for known_gaps)
from slow_cases import SLOW_CASES  # noqa: E402

# Only the files port.py generates are marked from the tables; a file ported by hand (test_model_checkpoint.py)
# carries its own marks.
_GENERATED = set(FILES.values())


def _known_gaps() -> dict[str, str]:
    if os.environ.get("FABRICX_CONFORMANCE_NO_GAPS") == "1":
        return {}
    from known_gaps import KNOWN_GAPS

    return KNOWN_GAPS


_LIGHTNING_NAME = {"TrainModule": "LightningModule", "DataModule": "LightningDataModule"}
_LIGHTNING_NAMES = re.compile(r"(?<=[\[-])(TrainModule|DataModule)(?=[\]-])")


def _lightning_passing() -> set[str] | None:
    path = _HERE / "lightning_passing.txt"
    if not path.exists():
        return None
    return {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    passing = _lightning_passing()
    gaps = _known_gaps()
    kept, deselected = [], []
    for item in items:
        path = Path(str(item.fspath))
        if path.parent != _HERE or path.name not in _GENERATED:
            kept.append(item)
            continue
        # Parametrized by class, a case's id names fabricx's class where Lightning's names its own.
        node = _LIGHTNING_NAMES.sub(lambda m: _LIGHTNING_NAME[m.group(0)], f"{path.name}::{item.name}")
        if passing is not None and node not in passing:
            deselected.append(item)
            continue
        if path.name in SLOW_FILES or node in SLOW_CASES:
            item.add_marker(pytest.mark.slow)
        reason = gaps.get(node) or gaps.get(node.split("[", 1)[0])
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(autouse=True)
def _reset_deterministic_algorithm():
    yield
    torch.use_deterministic_algorithms(False)


def _mock_cuda_count(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)


@pytest.fixture
def cuda_count_1(monkeypatch: pytest.MonkeyPatch) -> None:
    _mock_cuda_count(monkeypatch, 1)


@pytest.fixture
def cuda_count_2(monkeypatch: pytest.MonkeyPatch) -> None:
    _mock_cuda_count(monkeypatch, 2)


@pytest.fixture
def mps_count_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


@pytest.fixture
def caplog(caplog: pytest.LogCaptureFixture):
    """Lightning's workaround: loggers that do not propagate are made to, so ``caplog`` sees their records."""
    names = [name for name in logging.root.manager.loggerDict if name.startswith(("fabricx", "lightning"))]
    saved = {name: logging.getLogger(name).propagate for name in names}
    for name in names:
        logging.getLogger(name).propagate = True
    yield caplog
    for name, propagate in saved.items():
        logging.getLogger(name).propagate = propagate


@pytest.fixture
def tmpdir_server(tmp_path: Path):
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    with ThreadingHTTPServer(("localhost", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server.server_address
        server.shutdown()


@pytest.fixture
def single_process_pg():
    """A default process group of this process alone (gloo), destroyed afterwards."""
    import socket

    if torch.distributed.is_initialized():
        raise RuntimeError("Can't use `single_process_pg` when the default process group is already initialized.")
    saved = os.environ.copy()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    torch.distributed.init_process_group("gloo")
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)
