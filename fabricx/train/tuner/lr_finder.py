"""The learning-rate range test behind ``Tuner.lr_find``: raise the rate every step and record the loss."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

log = logging.getLogger(__name__)


class LRFinder:
    """What ``Tuner.lr_find`` returns: the rates tried and the smoothed losses, with a suggestion and a plot.

    ``results`` is ``{"lr": [...], "loss": [...]}``, one entry per optimizer step of the search.

    Example:

    ```python
    finder = Tuner(trainer).lr_find(model)
    finder.results["lr"][:3], finder.suggestion()
    finder.plot(suggest=True).savefig("lr.png")
    ```
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        if mode not in ("linear", "exponential"):
            raise MisconfigurationException(f"lr_find(mode={mode!r}); mode should be either `linear` or `exponential`.")
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, Any] = {}
        self._optimal_idx: int | None = None

    def lr_at(self, step: int) -> float:
        """The rate the search trains with at its ``step``-th optimizer step (Lightning's schedule)."""
        if step == 0:
            return self.lr_min
        fraction = (step + 1) / self.num_training
        if self.mode == "linear":
            return self.lr_min + fraction * (self.lr_max - self.lr_min)
        return self.lr_min * (self.lr_max / self.lr_min) ** fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The rate where the loss falls fastest (steepest negative gradient), skipping the ends.

        Returns ``None`` (and logs an error) when fewer than two finite losses remain.
        """
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end], dtype=torch.float64)
        lrs = torch.tensor(self.results["lr"][skip_begin:-skip_end], dtype=torch.float64)
        finite = torch.isfinite(losses)
        losses, lrs = losses[finite], lrs[finite]
        if len(losses) < 2:
            log.error(
                "Failed to compute suggestion for learning rate because there are not enough points. Increase the loop"
                " iteration limits or the size of your dataset/dataloader."
            )
            self._optimal_idx = None
            return None
        gradients = torch.gradient(losses, spacing=[lrs])[0]
        steepest = int(torch.argmin(gradients).item())
        kept = torch.arange(len(self.results["loss"]))[skip_begin:-skip_end][finite]
        self._optimal_idx = int(kept[steepest].item())
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """Loss against rate (log scale in exponential mode); ``suggest`` marks the suggestion in red."""
        try:
            import matplotlib.pyplot as plt
        except ModuleNotFoundError as err:
            raise MisconfigurationException(
                "To use the `plot` method, you must have Matplotlib installed."
                " Install it by running `pip install -U matplotlib`."
            ) from err
        lrs, losses = self.results["lr"], self.results["loss"]
        if ax is None:
            fig, ax = plt.subplots()
        else:
            fig = ax.figure
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest:
            self.suggestion()
            if self._optimal_idx:
                ax.plot(lrs[self._optimal_idx], losses[self._optimal_idx], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return fig


class LRSearch(Callback):
    """Sets each step's rate from an `LRFinder` schedule and records the smoothed loss.

    The module's own schedulers are switched off for the search. Stops early once the smoothed loss
    exceeds ``early_stop_threshold`` times the best one.
    """

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None = 4.0, beta: float = 0.98) -> None:
        self.finder = finder
        self.early_stop_threshold = early_stop_threshold
        self.beta = beta
        self.lrs: list[float] = []
        self.losses: list[float] = []
        self.avg_loss = 0.0
        self.best_loss = 0.0

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(
                f"`model.configure_optimizers()` returned {len(trainer.optimizers)}, but"
                " learning rate finder only works with single optimizer"
            )
        trainer.lr_scheduler_configs.clear()
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = group["initial_lr"] = self.finder.lr_min

    def _at_step_boundary(self, trainer: Trainer, batch_idx: int) -> bool:
        return (batch_idx + 1) % max(1, trainer.accumulate_grad_batches) == 0

    def on_train_batch_start(self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int) -> None:
        if not self._at_step_boundary(trainer, batch_idx):
            return
        lr = self.finder.lr_at(len(self.lrs))
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr
        self.lrs.append(lr)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._at_step_boundary(trainer, batch_idx):
            return
        loss = outputs if isinstance(outputs, torch.Tensor) else (outputs or {}).get("loss")
        if loss is None:
            self.losses.append(float("nan"))
            return
        step = trainer.global_step
        self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * float(loss.item())
        smoothed = self.avg_loss / (1 - self.beta ** (step + 1))
        threshold = self.early_stop_threshold
        if threshold is not None and step > 1 and smoothed > threshold * self.best_loss:
            trainer.should_stop = True
        if smoothed < self.best_loss or step == 1:
            self.best_loss = smoothed
        self.losses.append(smoothed)


def determine_lr_attr_name(module: Any, attr_name: str = "") -> str:
    """The module attribute holding the learning rate: ``attr_name``, else ``lr`` or ``learning_rate``."""
    from fabricx.train.tuner.attributes import lightning_hasattr

    if attr_name:
        if not lightning_hasattr(module, attr_name):
            raise AttributeError(
                f"The attribute name for the learning rate was set to {attr_name}, but"
                " could not find this as a field in `model` or `model.hparams`."
            )
        return attr_name
    for candidate in ("lr", "learning_rate"):
        if lightning_hasattr(module, candidate):
            return candidate
    raise AttributeError(
        "When using the learning rate finder, either `model` or `model.hparams` should"
        " have one of these fields: ('lr', 'learning_rate'). If your model has a different name for the learning"
        " rate, set it with `.lr_find(attr_name=...)`."
    )
