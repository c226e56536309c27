"""The clients and how one of their own test runs is launched: in a fresh process, on Lightning or on fabricx.

A run is ``python -m pytest <the client's tests> -p client_plugin`` in a copy of the client's folder beside the
report (its own pytest settings apply, and what it writes stays out of the source tree), with
``FABRICX_CLIENT_FRAMEWORK`` choosing the framework; the plugin writes each case's outcome to a JSON file,
which `run_client` returns.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CLIENTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CLIENTS_DIR.parents[1]
#: Where `make clients` installs the clients' packages (seen by the clients' runs only).
SITE = REPO_ROOT / ".cache" / "clients-site"


@dataclass(frozen=True)
class Client:
    """One client: its folder under tests/clients, the test paths its full run takes and the fast sample's node ids."""

    folder: str
    tests: tuple[str, ...]
    fast: tuple[str, ...]
    #: The packages its tests import (installed by `make clients`, not by `make test`: see README.md).
    requires: tuple[str, ...] = ()
    #: Folders of stand-ins (relative to the repository) its runs see before the clients' site.
    stand_ins: tuple[str, ...] = ()

    @property
    def missing(self) -> list[str]:
        return [name for name in self.requires if not (SITE / name).is_dir() and importlib.util.find_spec(name) is None]


CLIENTS = (
    Client(
        "lightning_hydra_template",
        tests=("tests",),
        fast=("tests/test_train.py::test_train_fast_dev_run",),
        requires=("hydra", "omegaconf", "rootutils", "colorlog"),
    ),
    Client(
        "nn_template",
        tests=("tests",),
        fast=("tests/test_configuration.py::test_model_instantiation",),
        requires=("hydra", "omegaconf", "nn_core", "anypy", "datasets", "wandb"),
        # its MNIST config names torchvision's transforms, and PyPI's torchvision cannot import here (README.md)
        stand_ins=("tests/examples/lightning_fabric/stand_ins",),
    ),
    Client(
        "lightly",
        tests=("tests/utils/benchmarking/test_knn_classifier.py",),
        fast=("tests/utils/benchmarking/test_knn_classifier.py::TestKNNClassifier::test",),
        requires=("lightly",),
    ),
    Client(
        "pytorch_forecasting",
        tests=("tests/test_models/test_nbeats.py", "tests/test_models/test_nhits.py"),
        fast=(),  # its models do not import under the alias yet (known_differences.py)
        requires=("pytorch_forecasting",),
    ),
    Client(
        "torchmetrics",
        # torchmetrics itself is a project dependency: nothing to install
        tests=("integrations/test_lightning.py",),
        # all nine cases: the launch costs most of the time, the cases about 7 s together
        fast=tuple(
            f"integrations/test_lightning.py::test_{name}"
            for name in (
                "metric_lightning",
                "metrics_reset",
                "metric_lightning_log",
                "metric_collection_lightning_log",
                "task_wrapper_lightning_logging",
                "scriptable",
                "dtype_in_pl_module_transfer",
                "collection_classwise_lightning_integration",
                "collection_minmax_lightning_integration",
            )
        ),
    ),
    Client(
        "gluonts",
        tests=("test/torch/model/test_estimators.py",),
        fast=(),  # a case takes 10-25 s: the full run is slow only
        requires=("gluonts",),
    ),
)


def run_client(
    client: Client, framework: str, selection: tuple[str, ...], report: Path, timeout: float
) -> dict[str, str]:
    """Run `selection` of `client`'s tests on ``"lightning"`` or ``"fabricx"``; node id -> outcome.

    Example:
        ```python
        run_client(CLIENTS[0], "fabricx", CLIENTS[0].fast, tmp_path / "r.json", timeout=120)
        ```
    """
    env = {
        **os.environ,
        "FABRICX_CLIENT_FRAMEWORK": framework,
        "FABRICX_CLIENT_REPORT": str(report),
        "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT), str(CLIENTS_DIR), *(str(REPO_ROOT / path) for path in client.stand_ins), str(SITE)]
        ),
    }
    command = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", "-p", "client_plugin"]
    workdir = report.parent / f"{client.folder}-{framework}"
    shutil.copytree(CLIENTS_DIR / client.folder, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    if not report.exists():
        raise AssertionError(
            f"{client.folder} on {framework} wrote no report:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return json.loads(report.read_text())
