"""The interface every experiment logger implements (the same as Lightning Fabric's)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fabricx.utilities.rank_zero import rank_zero_only


class Logger(ABC):
    """Receives metrics and hyperparameters; subclasses write them on global rank 0 only.

    Example:
        ```python
        class PrintLogger(Logger):
            name = "print"
            version = 0

            @rank_zero_only
            def log_metrics(self, metrics, step=None):
                print(step, metrics)

            @rank_zero_only
            def log_hyperparams(self, params):
                print(params)
        ```
    """

    #: Joins a logger's ``prefix`` and a metric name (``"train-loss"``), as every Lightning logger does.
    LOGGER_JOIN_CHAR = "-"

    @property
    @abstractmethod
    def name(self) -> str | None:
        """The experiment's name: the folder that groups its versions."""

    @property
    @abstractmethod
    def version(self) -> int | str | None:
        """The run's version inside the experiment."""

    @property
    def root_dir(self) -> str | None:
        """The folder holding every experiment of this logger, if it writes to disk."""
        return None

    @property
    def log_dir(self) -> str | None:
        """The folder this run writes to, if it writes to disk."""
        return None

    @property
    def group_separator(self) -> str:
        """The character that joins a metric group and a metric name, as in ``"train/loss"``."""
        return "/"

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float | torch.Tensor], step: int | None = None) -> None:
        """Record a set of scalar metrics at ``step``."""

    @abstractmethod
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Record the run's hyperparameters."""

    def log_graph(self, model: nn.Module, input_array: torch.Tensor | None = None) -> None:
        """Record the model's computation graph, where the logger supports it."""

    def save(self) -> None:
        """Write out anything still buffered."""

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Finish the run (``status`` is e.g. ``"success"`` or ``"failed"``) and write everything out."""
        self.save()
