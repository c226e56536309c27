"""A logger that records metrics, hyperparameters and tags in an MLflow run (Lightning's constructor names)."""

from __future__ import annotations

import os
import time
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from fabricx.loggers.artifacts import CheckpointArtifacts
from fabricx.loggers.base import Logger
from fabricx.loggers.utils import add_prefix, flatten_dict, metric_value, params_to_dict, rank_zero_experiment
from fabricx.utilities.imports import lazy_import, require, rng_untouched
from fabricx.utilities.rank_zero import rank_zero_only

_FILE_URI_PREFIX = "file:"
# MLflow refuses longer parameter values; longer ones are cut rather than failing the run.
_PARAM_VALUE_LIMIT = 6000
_BATCH_LIMIT = 1000
_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


class MLFlowLogger(CheckpointArtifacts, Logger):
    """Log to an MLflow tracking server or a local store, with Lightning's ``MLFlowLogger`` arguments.

    The run is created lazily on global rank 0 at the first use of `experiment`, `run_id`
    or a ``log_*`` call; other ranks never contact the tracking server.

    Args:
        experiment_name: The MLflow experiment (created if missing).
        run_name: A name for the run.
        tracking_uri: Where the tracking server or store is (``MLFLOW_TRACKING_URI`` by default); without one
            the run goes to a local SQLite store ``{save_dir}/mlflow.db`` (artifacts in ``{save_dir}/artifacts``).
        tags: Tags set on the run.
        save_dir: The local store used when there is no ``tracking_uri``.
        log_model: ``True`` logs checkpoints as artifacts at `finalize()`, ``"all"`` as they are
            reported through `after_save_checkpoint()`; ``False`` logs none.
        prefix: Put ``f"{prefix}-"`` in front of every metric name.
        artifact_location: Where a new experiment stores artifacts.
        run_id: Continue an existing run instead of starting one.
        synchronous: Passed to MLflow's logging calls (``False`` logs in the background).

    Example:
        ```python
        logger = MLFlowLogger(
            experiment_name="digits", tracking_uri="sqlite:///mlflow.db"
        )
        fabric = Fabric(loggers=logger)
        fabric.log("loss", 0.25, step=1)
        logger.finalize("success")
        ```
    """

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = os.getenv("MLFLOW_TRACKING_URI"),
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        require("mlflow", extra="mlflow", feature="MLFlowLogger")
        if log_model not in (True, False, "all"):
            raise ValueError(f"log_model={log_model!r}; allowed are True, False and 'all'.")
        local_store = Path(save_dir or "./mlruns").absolute()
        if not tracking_uri:
            # A SQLite store in save_dir: MLflow 3 refuses its old file store, and SQLite works in 2 and 3.
            tracking_uri = f"sqlite:///{local_store / 'mlflow.db'}"
            local_store.mkdir(parents=True, exist_ok=True)
            if artifact_location is None:
                artifact_location = (local_store / "artifacts").as_uri()
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._tracking_uri = tracking_uri
        self._tags = dict(tags or {})
        self._save_dir = save_dir
        self._log_model = log_model
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._synchronous = synchronous
        self._client: Any = None
        self._checkpoints: list[str] = []

    # -- the MLflow objects -------------------------------------------------------------------------
    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``mlflow.MlflowClient`` of this run (created on first use); a do-nothing object off rank 0."""
        if self._client is not None:
            return self._client
        with rng_untouched():  # MLflow names unnamed runs with Python's global random
            return self._start(lazy_import("mlflow.tracking").MlflowClient(tracking_uri=self._tracking_uri))

    def _start(self, client: Any) -> Any:
        if self._run_id is not None:
            run = client.get_run(self._run_id)
            self._experiment_id = run.info.experiment_id
        else:
            experiment = client.get_experiment_by_name(self._experiment_name)
            if experiment is None:
                self._experiment_id = client.create_experiment(
                    self._experiment_name, artifact_location=self._artifact_location
                )
            else:
                self._experiment_id = experiment.experiment_id
            tags = {key: str(value) for key, value in self._tags.items()}
            if self._run_name is not None:
                tags.setdefault("mlflow.runName", self._run_name)
            run = client.create_run(experiment_id=self._experiment_id, tags=tags, run_name=self._run_name)
            self._run_id = run.info.run_id
        self._client = client
        return client

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id (starts the run on rank 0)."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id (starts the run on rank 0)."""
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        return self.experiment_id

    @property
    def version(self) -> str | None:
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The local store's folder when the run is stored locally (``file:`` or ``sqlite:`` URI)."""
        for prefix in (_FILE_URI_PREFIX, "sqlite:///"):
            if self._tracking_uri.startswith(prefix):
                location = Path(self._tracking_uri[len(prefix) :])
                return os.fspath(location.parent if prefix == "sqlite:///" else location)
        return None

    # -- logging ---------------------------------------------------------------------------------------
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        Param = lazy_import("mlflow.entities").Param

        flat = flatten_dict(params_to_dict(params))
        entries = [Param(key, str(value)[:_PARAM_VALUE_LIMIT]) for key, value in flat.items()]
        for start in range(0, len(entries), 100):  # MLflow takes at most 100 parameters per batch
            self.experiment.log_batch(run_id=self.run_id, params=entries[start : start + 100], **self._sync())

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        Metric = lazy_import("mlflow.entities").Metric

        timestamp = int(time.time() * 1000)
        entries = []
        for key, value in add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                continue  # MLflow metrics are numbers; Lightning skips strings the same way
            entries.append(
                Metric(key=_safe_key(key), value=float(metric_value(key, value)), timestamp=timestamp, step=step or 0)
            )
        for start in range(0, len(entries), _BATCH_LIMIT):
            self.experiment.log_batch(run_id=self.run_id, metrics=entries[start : start + _BATCH_LIMIT], **self._sync())

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if self._client is None:
            return  # no run was started, so there is nothing to close
        self._store_final_checkpoints()
        self._client.set_terminated(self._run_id, _STATUS.get(status, "FINISHED"))

    def _store_checkpoint(self, path: str) -> None:
        if os.path.isdir(path):
            self.experiment.log_artifacts(self.run_id, path, artifact_path=f"checkpoints/{Path(path).name}")
        elif os.path.exists(path):
            self.experiment.log_artifact(self.run_id, path, artifact_path="checkpoints")

    def _sync(self) -> dict[str, Any]:
        return {} if self._synchronous is None else {"synchronous": self._synchronous}


def _safe_key(key: str) -> str:
    # MLflow allows letters, digits, and _ - . space / only; other characters become underscores.
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)
