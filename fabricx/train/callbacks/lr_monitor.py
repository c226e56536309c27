"""``LearningRateMonitor``: send every optimizer's learning rate to the loggers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer


class LearningRateMonitor(Callback):
    """Log ``lr-<Optimizer>`` (``/pg<n>`` per parameter group when there are several) to the loggers.

    ``logging_interval="step"`` logs together with the step metrics (every ``log_every_n_steps``
    optimizer steps), ``"epoch"`` at the start of every epoch. A scheduler config's ``name`` replaces
    the default name. ``log_momentum`` adds ``momentum-<Optimizer>`` (or Adam's beta1).

    Example::

        Trainer(callbacks=[LearningRateMonitor(logging_interval="step")])
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise MisconfigurationError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}); allowed are None, 'step', 'epoch'."
            )
        self.logging_interval = logging_interval or "step"
        self.log_momentum = log_momentum
        self.last_logged: dict[str, float] = {}
        self._names: list[list[str]] = []

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        if not trainer.loggers:
            from fabricx.utilities.rank_zero import rank_zero_warn

            rank_zero_warn("LearningRateMonitor has no logger to write to (Trainer(loggers=False)).")
        self._names = _names(trainer)

    def on_train_batch_start(self, trainer: Trainer, module: TrainModule, batch: Any, batch_idx: int) -> None:
        # As in Lightning: the rates this batch trains with, on the batches whose step metrics are logged.
        progress = trainer.progress
        if self.logging_interval == "step" and (progress.batches_that_stepped + 1) % trainer.log_every_n_steps == 0:
            self._log(trainer)

    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
        if self.logging_interval == "epoch":
            self._log(trainer)

    def _log(self, trainer: Trainer) -> None:
        values: dict[str, float] = {}
        for optimizer, names in zip(trainer.optimizers, self._names, strict=False):
            for group, name in zip(unwrap(optimizer).param_groups, names, strict=False):
                values[name] = float(group["lr"])
                if self.log_momentum:
                    momentum = group.get("momentum", group.get("betas", (None,))[0])
                    if momentum is not None:
                        values[name.replace("lr-", "momentum-", 1)] = float(momentum)
        self.last_logged = values
        if values and trainer.is_global_zero and trainer.loggers:
            trainer.fabric.log_dict(values, step=trainer.progress.batches_that_stepped)


def _names(trainer: Trainer) -> list[list[str]]:
    scheduler_names = {}
    for config in trainer.lr_scheduler_configs:
        target = getattr(config.scheduler, "optimizer", None)
        if config.name and target is not None:
            scheduler_names[id(target)] = config.name
    counts: dict[str, int] = {}
    out = []
    for optimizer in trainer.optimizers:
        inner = unwrap(optimizer)
        base = scheduler_names.get(id(inner)) or f"lr-{type(inner).__name__}"
        counts[base] = counts.get(base, 0) + 1
        if counts[base] > 1:
            base = f"{base}-{counts[base] - 1}"
        groups = len(optimizer.param_groups)
        out.append([base] if groups == 1 else [f"{base}/pg{i + 1}" for i in range(groups)])
    return out
