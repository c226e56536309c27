"""A logger that writes TensorBoard event files; tensorboard itself is imported only when used."""

from __future__ import annotations

import importlib.util
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fabricx.loggers.base import Logger
from fabricx.loggers.folders import VersionedFolder
from fabricx.loggers.utils import (
    add_prefix,
    flatten_dict,
    metric_value,
    params_to_dict,
    rank_zero_experiment,
    write_hparams_yaml,
)
from fabricx.utilities.imports import lazy_import
from fabricx.utilities.jit import jit_inspection
from fabricx.utilities.rank_zero import rank_zero_only, rank_zero_warn

HPARAMS_FILE = "hparams.yaml"
_MISSING_MESSAGE = (
    "TensorBoardLogger needs the `tensorboard` package, which is not installed."
    " Install it with `pip install 'fabricx[tensorboard]'`, or use CSVLogger instead."
)


def _summary_writer_class() -> type:
    try:
        SummaryWriter = lazy_import("torch.utils.tensorboard").SummaryWriter
    except ImportError as err:  # torch raises a plain ImportError when tensorboard is absent
        raise ModuleNotFoundError(_MISSING_MESSAGE) from err
    return SummaryWriter


class TensorBoardLogger(VersionedFolder, Logger):
    """Log to TensorBoard event files in ``{save_dir}/{name}/version_{n}[/{sub_dir}]``.

    The constructor is Lightning's Trainer logger's (``save_dir, name, version, log_graph,
    default_hp_metric, prefix, sub_dir``) and also takes Lightning Fabric's ``root_dir=`` spelling.

    Args:
        save_dir: Folder holding every experiment (``root_dir=`` is accepted as in Lightning Fabric).
        name: Experiment name, a sub-folder of ``save_dir`` (``""`` or ``None`` writes the versions in ``save_dir``).
        version: An int gives ``version_{version}``, a string is the folder name itself, ``None``
            takes the next free ``version_{n}``.
        log_graph: Whether the Trainer should log the model's graph (a direct `log_graph()` call always does).
        default_hp_metric: Log a placeholder ``hp_metric`` with the hyperparameters, so that
            TensorBoard's HPARAMS tab shows the run even before a real metric is attached.
        prefix: Put ``f"{prefix}-"`` in front of every metric name.
        sub_dir: An extra folder below the version folder.
        **summary_writer_kwargs: Passed on to ``torch.utils.tensorboard.SummaryWriter``.

    Example:

    ```python
    logger = TensorBoardLogger("logs", name="mnist")
    logger.log_metrics({"train/loss": 0.25}, step=10)
    logger.experiment.add_histogram("weights", model.fc.weight, 10)
    logger.finalize("success")
    ```
    """

    NAME_HPARAMS_FILE = HPARAMS_FILE

    def __init__(
        self,
        root_dir: str | os.PathLike | None = None,
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike | None = None,
        *,
        save_dir: str | os.PathLike | None = None,
        **summary_writer_kwargs: Any,
    ) -> None:
        # Checked without importing, so a missing package is reported where the logger is created.
        if importlib.util.find_spec("tensorboard") is None:
            raise ModuleNotFoundError(_MISSING_MESSAGE)
        self._set_folders("TensorBoardLogger", root_dir, save_dir, name, version)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = None if sub_dir is None else os.fspath(sub_dir)
        self._kwargs = summary_writer_kwargs
        self._experiment: Any = None
        self.hparams: dict[str, Any] = {}

    @property
    def logs_graph(self) -> bool:
        """Whether a Trainer logs the module's graph here when fit starts (the constructor's ``log_graph``).

        Example:
            ```python
            assert TensorBoardLogger("logs", log_graph=True).logs_graph
            ```
        """
        return self._log_graph

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    def log_dir(self) -> str:
        path = self._version_dir()
        if self._sub_dir is not None:
            path = os.path.join(path, self._sub_dir)
        return os.path.expandvars(os.path.expanduser(path))

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``SummaryWriter`` on global rank 0 (created on first use); a do-nothing object elsewhere."""
        if self._experiment is None:
            self._experiment = _summary_writer_class()(log_dir=self.log_dir, **self._kwargs)
        return self._experiment

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        for key, value in add_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, Mapping):
                scalars = {name: metric_value(f"{key}/{name}", v) for name, v in value.items()}
                self.experiment.add_scalars(key, scalars, step)
            else:
                self.experiment.add_scalar(key, metric_value(key, value), step)

    @rank_zero_only
    def log_hyperparams(
        self,
        params: dict[str, Any] | Namespace,
        metrics: Mapping[str, float] | None = None,
        step: int | None = None,
    ) -> None:
        """Record hyperparameters for the HPARAMS tab; ``metrics`` are shown next to them (logged at ``step``)."""
        hparams = lazy_import("torch.utils.tensorboard.summary").hparams

        params = params_to_dict(params)
        self.hparams.update(params)
        if metrics is None and self._default_hp_metric:
            metrics = {"hp_metric": -1}
        if metrics:
            self.log_metrics(metrics, 0 if step is None else step)
        flat = {key: _hparam_value(value) for key, value in flatten_dict(params).items()}
        writer = self.experiment._get_file_writer()
        for summary in hparams(flat, dict(metrics or {})):
            writer.add_summary(summary)

    @rank_zero_only
    def log_graph(self, model: nn.Module, input_array: torch.Tensor | None = None) -> None:
        if input_array is None:
            input_array = getattr(model, "example_input_array", None)
        if input_array is None:
            rank_zero_warn(
                "Could not log computational graph to TensorBoard: The `model.example_input_array` attribute"
                " is not set or `input_array` was not given. log_graph needs an example input: pass"
                " `input_array` or set `model.example_input_array`."
            )
        elif not isinstance(input_array, (torch.Tensor, tuple)):
            rank_zero_warn(
                "Could not log computational graph to TensorBoard: The `input_array` or `model.example_input_array`"
                f" has type {type(input_array)} which can't be traced by TensorBoard. Make the input array a tuple"
                " representing the positional arguments to the model's `forward()` implementation."
            )
        else:
            # Tracing reads every attribute of the module (and its submodules); a TrainModule's `trainer` and
            # `fabric` refuse to be read outside a run except while TorchScript inspects it.
            with jit_inspection():
                self.experiment.add_graph(model, input_array)

    @rank_zero_only
    def save(self) -> None:
        if self._experiment is not None:
            self._experiment.flush()
        path = os.path.join(self.log_dir, HPARAMS_FILE)
        # As in Lightning, a run that wrote anything gets an hparams.yaml, even an empty one.
        if self.hparams or (os.path.isdir(self.log_dir) and not os.path.isfile(path)):
            os.makedirs(self.log_dir, exist_ok=True)
            write_hparams_yaml(path, self.hparams)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()
        if self._experiment is not None:
            self._experiment.close()

    def __getstate__(self) -> dict[str, Any]:
        # A SummaryWriter holds threads and open files; a copy sent to another process opens its own.
        state = self.__dict__.copy()
        state["_experiment"] = None
        return state


def _hparam_value(value: Any) -> Any:
    # TensorBoard's HPARAMS tab takes numbers, strings, booleans; anything else is shown as its text.
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return str(value)
