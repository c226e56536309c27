"""A logger that records metrics and hyperparameters in a Weights & Biases run (Lightning's constructor names)."""

from __future__ import annotations

import os
import time
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from fabricx.loggers.artifacts import CheckpointArtifacts
from fabricx.loggers.base import Logger
from fabricx.loggers.utils import add_prefix, metric_value, params_to_dict, rank_zero_experiment
from fabricx.utilities.imports import lazy_import, require, rng_untouched
from fabricx.utilities.rank_zero import rank_zero_only

_STEP_KEY = "trainer/global_step"


class WandbLogger(CheckpointArtifacts, Logger):
    """Log to Weights & Biases, online or offline, with Lightning's ``WandbLogger`` arguments.

    The run starts lazily on global rank 0 at the first use of `experiment` or a ``log_*`` call.
    A logged ``step`` is recorded as the ``trainer/global_step`` metric (as Lightning does), so calls
    with steps that repeat or go back never make W&B drop values.

    Args:
        name: The run's display name.
        save_dir: The folder W&B writes its ``wandb/`` files into.
        version: The run id to create or resume (same as ``id``).
        offline: Write locally only (sync later with ``wandb sync``).
        dir: Same as ``save_dir``.
        id: Same as ``version``.
        anonymous: Log anonymously (``"allow"``) when no API key is set.
        project: The W&B project (``WANDB_PROJECT`` or ``"lightning_logs"`` by default).
        log_model: ``True`` uploads checkpoints at `finalize()`, ``"all"`` as they are reported
            through `after_save_checkpoint()`; ``False`` uploads none.
        experiment: An already started ``wandb`` run to log into.
        prefix: Put ``f"{prefix}-"`` in front of every metric name.
        checkpoint_name: The artifact name for checkpoints (``model-{run id}`` by default).
        **kwargs: Passed on to ``wandb.init`` (``entity``, ``group``, ``tags``, ``config``, ...).

    Example:
        ```python
        logger = WandbLogger(project="digits", offline=True, save_dir="runs")
        fabric = Fabric(loggers=logger)
        fabric.log("loss", 0.25, step=1)
        logger.finalize("success")
        ```
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        require("wandb", extra="wandb", feature="WandbLogger")
        if offline and log_model:
            raise ValueError(
                f"WandbLogger(offline=True, log_model={log_model!r}): checkpoints can only be uploaded online. "
                "Pass log_model=False, or log online."
            )
        if save_dir == "." and dir is not None:
            save_dir = dir
        self._save_dir = os.fspath(save_dir)
        self._offline = offline
        self._log_model = log_model
        self._prefix = prefix
        self._checkpoint_name = checkpoint_name
        self._experiment = experiment
        self._checkpoints: list[str] = []
        self._started_second: int | None = None
        self._init_kwargs: dict[str, Any] = {
            "name": name,
            "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": self._save_dir,
            "id": version or id,
            "resume": "allow",
            "anonymous": "allow" if anonymous else None,
            **kwargs,
        }
        if offline:
            self._init_kwargs["mode"] = "offline"

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``wandb`` run (started on first use); a do-nothing object off rank 0."""
        if self._experiment is not None:
            return self._experiment
        wandb = lazy_import("wandb")
        if wandb.run is not None:
            self._experiment = wandb.run  # a run the user started already: log into it
        else:
            Path(self._save_dir).mkdir(parents=True, exist_ok=True)
            kwargs = {key: value for key, value in self._init_kwargs.items() if value is not None}
            if self._started_second is not None:
                # Continuing the run this logger ended: W&B names a run's folder after its start second, so a
                # resume within the same second would write over the first part's log.
                while int(time.time()) <= self._started_second:
                    time.sleep(0.05)
            with rng_untouched():  # starting a run must not move the training run's random streams
                self._experiment = wandb.init(**kwargs)
            self._started_second = int(time.time())
        # The run's id from now on: after finalize() ended the run, the next use continues this same run
        # (W&B resumes it) instead of starting a new, empty one.
        self._init_kwargs["id"] = getattr(self._experiment, "id", None) or self._init_kwargs.get("id")
        if getattr(self._experiment, "define_metric", None) is not None:
            # Every metric is plotted against the trainer's step rather than W&B's own counter.
            self._experiment.define_metric(_STEP_KEY)
            self._experiment.define_metric("*", step_metric=_STEP_KEY, step_sync=True)
        return self._experiment

    @property
    def name(self) -> str | None:
        return self._init_kwargs["project"]

    @property
    def version(self) -> str | None:
        if self._experiment is not None:
            return self._experiment.id
        return self._init_kwargs.get("id")

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def log_dir(self) -> str | None:
        run_dir = getattr(self._experiment, "dir", None)
        return os.fspath(run_dir) if run_dir else None

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        self.experiment.config.update(params_to_dict(params), allow_val_change=True)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        values = {key: value if isinstance(value, str) else metric_value(key, value) for key, value in metrics.items()}
        self._log(values, step)

    def _log(self, values: Mapping[str, Any], step: int | None) -> None:
        values = dict(add_prefix(values, self._prefix, self.LOGGER_JOIN_CHAR))
        if step is not None:
            values[_STEP_KEY] = step
        self.experiment.log(values)

    def watch(
        self, model: nn.Module, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True
    ) -> None:
        """Have W&B record the model's gradients (``log="gradients"``), parameters (``"parameters"``), both
        (``"all"``) or neither (``None``) every ``log_freq`` steps, and its graph.

        Example:
            ```python
            logger.watch(model, log="all", log_freq=50)
            ```
        """
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    @rank_zero_only
    def log_table(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """Log a ``wandb.Table`` from ``columns`` and ``data`` rows, or from a pandas ``dataframe``.

        Example:
            ```python
            logger.log_table("samples", columns=["prompt", "reply"],
                             data=[["hi", "hello"]], step=10)
            ```
        """
        wandb = lazy_import("wandb")
        self._log({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)

    @rank_zero_only
    def log_text(
        self,
        key: str,
        columns: list[str] | None = None,
        data: list[list[str]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
    ) -> None:
        """Log text as a table (the same arguments as `log_table`).

        Example:
            ```python
            logger.log_text("generations", columns=["text"], data=[["once upon a time"]])
            ```
        """
        self.log_table(key, columns, data, dataframe, step)

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log images (tensors, NumPy arrays, PIL images or file paths); each keyword is a list with one value
        per image for ``wandb.Image`` (``caption=``, ``masks=``, ``boxes=``).

        Example:
            ```python
            logger.log_image("samples", [image_a, image_b], caption=["a", "b"], step=3)
            ```
        """
        wandb = lazy_import("wandb")
        self._log({key: _media(wandb.Image, "images", images, kwargs)}, step)

    @rank_zero_only
    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log audio clips (NumPy arrays or file paths); keywords are per-clip lists for ``wandb.Audio``
        (``caption=``, ``sample_rate=``).

        Example:
            ```python
            logger.log_audio("speech", [waveform], sample_rate=[16000])
            ```
        """
        wandb = lazy_import("wandb")
        self._log({key: _media(wandb.Audio, "audios", audios, kwargs)}, step)

    @rank_zero_only
    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Log videos (NumPy arrays or file paths); keywords are per-video lists for ``wandb.Video``
        (``caption=``, ``fps=``, ``format=``).

        Example:
            ```python
            logger.log_video("rollouts", [frames], fps=[4])
            ```
        """
        wandb = lazy_import("wandb")
        self._log({key: _media(wandb.Video, "videos", videos, kwargs)}, step)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        """Upload the checkpoints (``log_model=True``) and end the W&B run, so its files are complete; using
        `experiment` (or a ``log_*`` method) afterwards continues the same run (W&B resumes its id)."""
        if self._experiment is None:
            return
        self._store_final_checkpoints()
        self._experiment.finish(exit_code=0 if status == "success" else 1)
        self._experiment = None

    def _store_checkpoint(self, path: str) -> None:
        name = self._checkpoint_name or f"model-{self.experiment.id}"
        artifact = lazy_import("wandb").Artifact(name=name, type="model")
        if os.path.isdir(path):
            artifact.add_dir(path)
        else:
            artifact.add_file(path)
        self.experiment.log_artifact(artifact)


def _media(kind: Any, what: str, items: list[Any], per_item: dict[str, list[Any]]) -> list[Any]:
    """``kind(item, **keywords)`` for each item, the keywords given as one list per name (Lightning's form)."""
    if not isinstance(items, list):
        raise TypeError(f'Expected a list as "{what}", found {type(items)}')
    for name, values in per_item.items():
        if len(values) != len(items):
            raise ValueError(f"Expected {len(items)} items but only found {len(values)} for {name}")
    return [kind(item, **{name: values[i] for name, values in per_item.items()}) for i, item in enumerate(items)]
