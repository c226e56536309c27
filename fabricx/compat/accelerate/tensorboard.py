"""``log_with="tensorboard"`` for the Accelerate adapter: the files Accelerate's ``TensorBoardTracker``
writes (events in ``logging_dir/project_name``, the configuration as hyperparameters with no metric,
and a copy of it in ``hparams.yml``), and its methods, beside the fabricx ``Logger`` ones the
``Accelerator`` calls."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["TensorBoardTracker"]


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


class TensorBoardTracker:
    """Accelerate's TensorBoard tracker on the main process (``accelerator.get_tracker("tensorboard")``).

    Numbers go to ``add_scalar``, strings to ``add_text``, dicts of numbers to ``add_scalars``;
    ``store_init_configuration`` records the configuration with no metric (no ``hp_metric``).

    Example:
        ```python
        tracker = TensorBoardTracker("my_project", "runs/")
        tracker.store_init_configuration({"lr": 0.1})
        tracker.log({"loss": 0.5}, step=1)
        tracker.finish()
        ```
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.run_name = run_name
        self.logging_dir = os.path.join(os.fspath(logging_dir), run_name)
        self.writer = SummaryWriter(self.logging_dir, **kwargs)

    @property
    def tracker(self) -> Any:
        """The ``SummaryWriter``."""
        return self.writer

    experiment = tracker

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record ``values`` as the run's hyperparameters, and in ``<timestamp>/hparams.yml``."""
        import yaml

        self.writer.add_hparams(values, metric_dict={})
        self.writer.flush()
        folder = os.path.join(self.logging_dir, str(time.time()))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "hparams.yml"), "w") as handle:
            yaml.dump(values, handle)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Numbers as scalars, strings as text, dicts of numbers as grouped scalars."""
        for key, value in _plain(values).items():
            if isinstance(value, int | float):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
        self.writer.flush()

    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Each value a batch of images (``add_images``)."""
        for key, value in values.items():
            self.writer.add_images(key, value, global_step=step, **kwargs)

    def finish(self) -> None:
        """Close the writer."""
        self.writer.close()

    # The names the Accelerator calls on every tracker (fabricx's Logger protocol).
    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self.store_init_configuration(params)

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.log(metrics, step=step)

    def finalize(self, status: str) -> None:
        self.finish()
