"""A logger that writes metrics to a CSV file and hyperparameters to a YAML file."""

from __future__ import annotations

import csv
import os
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fabricx.loggers.base import Logger
from fabricx.loggers.folders import VersionedFolder
from fabricx.loggers.utils import (
    add_prefix,
    metric_value,
    params_to_dict,
    rank_zero_experiment,
    write_hparams_yaml,
)
from fabricx.utilities.rank_zero import rank_zero_only

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"


class ExperimentWriter:
    """What ``CSVLogger.experiment`` returns: buffers metric rows and writes ``metrics.csv`` and ``hparams.yaml``.

    ``metrics`` holds the rows not yet written, ``metrics_keys`` the file's columns, sorted by name as
    Lightning's. A new column rewrites the file with the wider header (atomically); otherwise rows are
    appended, also to a ``metrics.csv`` an earlier run left in the same folder.

    Example:

    ```python
    writer = CSVLogger("logs").experiment
    writer.log_metrics({"loss": 0.5}, step=0)
    writer.save()
    ```
    """

    NAME_METRICS_FILE = METRICS_FILE
    NAME_HPARAMS_FILE = HPARAMS_FILE

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.metrics_file_path = os.path.join(log_dir, self.NAME_METRICS_FILE)
        self.metrics: list[dict[str, Any]] = []
        # A URL (s3://, memory://, ...) is written through fsspec; a local folder directly.
        self._remote = "://" in log_dir and not log_dir.startswith("file://")
        self.metrics_keys: list[str] = [] if self._remote else _read_header(Path(self.metrics_file_path))
        self.hparams: dict[str, Any] = {}

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
        """Buffer one row; ``step`` defaults to the number of rows buffered so far."""
        row = {key: metric_value(key, value) for key, value in metrics_dict.items()}
        row["step"] = len(self.metrics) if step is None else step
        self.metrics.append(row)

    def log_hparams(self, params: Mapping[str, Any]) -> None:
        """Merge ``params`` into the stored hyperparameters and rewrite ``hparams.yaml``."""
        self.hparams.update(params)
        if self._remote:
            return  # hparams.yaml is written for local folders only
        os.makedirs(self.log_dir, exist_ok=True)
        write_hparams_yaml(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def save(self) -> None:
        """Write the buffered rows out and empty the buffer."""
        if not self.metrics:
            return
        if self._remote:
            self._save_remote()
            return
        seen = dict.fromkeys(key for row in self.metrics for key in row)
        new_keys = [key for key in seen if key not in self.metrics_keys]
        # The usual save (every log_every_n_steps): the file exists, nothing to create. `os.path`, not a `Path`:
        # building one costs more than the row written.
        if not new_keys and os.path.exists(self.metrics_file_path):
            with open(self.metrics_file_path, "a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.metrics_keys).writerows(self.metrics)
        else:
            path = Path(self.metrics_file_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._rewrite(path, new_keys)
        self.metrics = []

    def _save_remote(self) -> None:
        import fsspec

        fs, path = fsspec.core.url_to_fs(self.metrics_file_path)
        old_rows: list[dict[str, str]] = []
        if fs.isfile(path):
            with fs.open(path, "r", newline="") as handle:
                old_rows = list(csv.DictReader(handle))
        logged = (key for row in old_rows + self.metrics for key in row)
        columns = sorted({"step", *self.metrics_keys, *logged})
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "w", newline="") as handle:
            self._write_file(handle, columns, old_rows)
        self.metrics_keys = columns
        self.metrics = []

    def _rewrite(self, path: Path, new_keys: list[str]) -> None:
        # A new column changes the header, so the earlier rows are written again with the wider header.
        old_rows: list[dict[str, str]] = []
        if path.exists():
            with path.open(newline="") as handle:
                old_rows = list(csv.DictReader(handle))
        columns = sorted({"step", *self.metrics_keys, *new_keys})  # Lightning's order: by name
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", newline="") as handle:
            self._write_file(handle, columns, old_rows)
        # Replacing in one step means a crash mid-write never leaves a truncated metrics file.
        os.replace(partial, path)
        self.metrics_keys = columns

    def _write_file(self, handle: Any, columns: list[str], old_rows: list[dict[str, str]]) -> None:
        """A whole metrics file: the header, the rows it held, then the buffered rows."""
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(old_rows)
        writer.writerows(self.metrics)


class CSVLogger(VersionedFolder, Logger):
    """Log to ``{save_dir}/{name}/version_{n}/metrics.csv`` and ``hparams.yaml``.

    ``metrics.csv`` has a ``step`` column and one column per metric name ever logged; a row
    leaves the metrics it did not log empty. Rows are buffered and written every
    ``flush_logs_every_n_steps`` steps, on `save()` and on `finalize()`. Logging into an
    existing version folder appends to its ``metrics.csv``. The constructor is Lightning's Trainer
    logger's and also takes Lightning Fabric's ``root_dir=`` spelling.

    Args:
        save_dir: Folder holding every experiment (``root_dir=`` is accepted as in Lightning Fabric).
        name: Experiment name, a sub-folder of ``save_dir`` (``""`` or ``None`` writes the versions in ``save_dir``).
        version: An int gives ``version_{version}``, a string is the folder name itself, ``None``
            takes the next free ``version_{n}``.
        prefix: Put ``f"{prefix}-"`` in front of every metric name.
        flush_logs_every_n_steps: How often buffered rows are written out.

    Example:

    ```python
    logger = CSVLogger("logs", name="mnist")
    logger.log_hyperparams({"lr": 1e-3})
    logger.log_metrics({"loss": 0.25}, step=0)
    logger.finalize("success")
    ```
    """

    def __init__(
        self,
        root_dir: str | os.PathLike | None = None,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
        *,
        save_dir: str | os.PathLike | None = None,
    ) -> None:
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"flush_logs_every_n_steps must be at least 1, got {flush_logs_every_n_steps}.")
        self._set_folders("CSVLogger", root_dir, save_dir, name, version)
        self._prefix = prefix
        self._flush_logs_every_n_steps = flush_logs_every_n_steps
        self._experiment: ExperimentWriter | None = None

    @property
    def log_dir(self) -> str:
        return self._version_dir()

    @property
    def metrics_file_path(self) -> str:
        return os.path.join(self.log_dir, METRICS_FILE)

    @property
    def hparams(self) -> dict[str, Any]:
        return self.experiment.hparams if rank_zero_only.rank == 0 else {}

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """The `ExperimentWriter` on global rank 0 (created on first use); a do-nothing object elsewhere."""
        if self._experiment is None:
            self._experiment = ExperimentWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        metrics = add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        if step is None:
            # As Lightning: the rows not yet written out (so a step-less run counts from 0 after each flush).
            step = len(self.experiment.metrics)
        self.experiment.log_metrics(metrics, step)
        if (step + 1) % self._flush_logs_every_n_steps == 0:
            self.save()

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace | None = None, *args: Any, **kwargs: Any) -> None:
        self.experiment.log_hparams(params_to_dict(params or {}))

    @rank_zero_only
    def save(self) -> None:
        if self._experiment is not None:
            self._experiment.save()


def _read_header(path: Path) -> list[str]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])
