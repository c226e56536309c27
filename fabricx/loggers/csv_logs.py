"""A logger that writes metrics to a CSV file and hyperparameters to a YAML file."""

from __future__ import annotations

import csv
import os
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fabricx.loggers._utils import (
    add_prefix,
    metric_value,
    next_version,
    params_to_dict,
    version_dir_name,
    write_hparams_yaml,
)
from fabricx.loggers.base import Logger
from fabricx.utilities.rank_zero import rank_zero_only

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"


class CSVLogger(Logger):
    """Log to ``{root_dir}/{name}/version_{n}/metrics.csv`` and ``hparams.yaml``.

    ``metrics.csv`` has a ``step`` column and one column per metric name ever logged; a row
    leaves the metrics it did not log empty. Rows are buffered and written every
    ``flush_logs_every_n_steps`` steps, on :meth:`save` and on :meth:`finalize`. Logging into an
    existing version folder appends to its ``metrics.csv``.

    Args:
        root_dir: Folder holding every experiment.
        name: Experiment name, a sub-folder of ``root_dir`` (``""`` writes the versions in ``root_dir``).
        version: An int gives ``version_{version}``, a string is the folder name itself, ``None``
            takes the next free ``version_{n}``.
        prefix: Put ``f"{prefix}-"`` in front of every metric name.
        flush_logs_every_n_steps: How often buffered rows are written out.

    Example::

        logger = CSVLogger("logs", name="mnist")
        logger.log_hyperparams({"lr": 1e-3})
        logger.log_metrics({"loss": 0.25}, step=0)
        logger.finalize("success")
    """

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        root_dir: str | os.PathLike,
        name: str | None = "fabricx_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        if flush_logs_every_n_steps < 1:
            raise ValueError(f"flush_logs_every_n_steps must be at least 1, got {flush_logs_every_n_steps}.")
        self._root_dir = os.fspath(root_dir)
        self._name = name or ""
        # Chosen now, before any rank writes, so every process agrees on the folder.
        self._version = next_version(os.path.join(self._root_dir, self._name)) if version is None else version
        self._prefix = prefix
        self._flush_every = flush_logs_every_n_steps
        self._pending: list[dict[str, Any]] = []
        self._columns: list[str] | None = None
        self._rows_logged = 0
        self.hparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        return self._version

    @property
    def root_dir(self) -> str:
        return self._root_dir

    @property
    def log_dir(self) -> str:
        return os.path.join(self._root_dir, self._name, version_dir_name(self._version))

    @property
    def metrics_file_path(self) -> str:
        return os.path.join(self.log_dir, METRICS_FILE)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        row = {key: metric_value(key, value) for key, value in add_prefix(metrics, self._prefix, "-").items()}
        if step is None:
            step = self._rows_logged
        row["step"] = step
        self._pending.append(row)
        self._rows_logged += 1
        if (step + 1) % self._flush_every == 0:
            self.save()

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        self.hparams.update(params_to_dict(params))
        os.makedirs(self.log_dir, exist_ok=True)
        write_hparams_yaml(os.path.join(self.log_dir, HPARAMS_FILE), self.hparams)

    @rank_zero_only
    def save(self) -> None:
        if not self._pending:
            return
        path = Path(self.metrics_file_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._columns is None:
            self._columns = _read_header(path)
        new_keys = [
            key for key in dict.fromkeys(k for row in self._pending for k in row) if key not in self._columns
        ]
        if path.exists() and not new_keys:
            with path.open("a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self._columns).writerows(self._pending)
        else:
            self._rewrite(path, new_keys)
        self._pending = []

    def _rewrite(self, path: Path, new_keys: list[str]) -> None:
        # A new column changes the header, so the earlier rows are written again with the wider header.
        old_rows: list[dict[str, str]] = []
        if path.exists():
            with path.open(newline="") as handle:
                old_rows = list(csv.DictReader(handle))
        columns = list(self._columns or [])
        if "step" not in columns:
            columns.insert(0, "step")
        columns += [key for key in new_keys if key != "step"]
        partial = path.with_name(path.name + ".partial")
        with partial.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(old_rows)
            writer.writerows(self._pending)
        # Replacing in one step means a crash mid-write never leaves a truncated metrics file.
        os.replace(partial, path)
        self._columns = columns


def _read_header(path: Path) -> list[str]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])
