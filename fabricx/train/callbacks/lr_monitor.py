"""``LearningRateMonitor``: send every optimizer's learning rate (and momentum, weight decay) to the loggers."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.trainer_state import batches_that_stepped, logs_this_step
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


class LearningRateMonitor(Callback):
    """Log ``lr-<Optimizer>`` for each optimizer to the loggers, named as Lightning names them.

    Names: ``lr-Adam``; ``lr-SGD/pg1``, ``lr-SGD/pg2`` for several parameter groups (a group's
    ``"name"`` replaces ``pgN``); ``lr-Adam-1`` for a second optimizer of the same type; a scheduler
    config's ``name`` replaces the whole base name. ``logging_interval=None`` logs each scheduler at its
    own interval (step schedulers on logging steps, epoch schedulers at epoch start); ``"step"`` or
    ``"epoch"`` logs them all then. ``log_momentum`` adds ``<name>-momentum`` (Adam's beta1),
    ``log_weight_decay`` ``<name>-weight_decay``. Every logged rate is kept in ``lrs``.

    Example:

    ```python
    Trainer(callbacks=[LearningRateMonitor(logging_interval="step")])
    ```
    """

    def __init__(
        self,
        logging_interval: str | None = None,
        log_momentum: bool = False,
        log_weight_decay: bool = False,
    ) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise MisconfigurationException(
                f"logging_interval should be `step` or `epoch` or `None`; got LearningRateMonitor("
                f"logging_interval={logging_interval!r})."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    def on_train_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger."
                " Give the Trainer a logger (the default CSVLogger is used unless logger=False)."
            )
        if self.log_momentum and _lacks(trainer, "momentum") and _lacks(trainer, "betas"):
            rank_zero_warn(
                "You have set log_momentum=True, but some optimizers do not"
                " have momentum. This will log a value 0 for the momentum.",
                category=RuntimeWarning,
            )
        scheduler_names, seen, seen_types = self._find_names_from_schedulers(trainer.lr_scheduler_configs)
        optimizer_names, _ = self._find_names_from_optimizers(trainer.optimizers, seen, seen_types)
        flat = list(itertools.chain.from_iterable(scheduler_names + optimizer_names))
        self.lrs = {name: [] for name in flat}
        self.last_momentum_values = {name + "-momentum": None for name in flat}
        self.last_weight_decay_values = {name + "-weight_decay": None for name in flat}

    def on_train_batch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        # The rates this batch trains with, on the batches whose step metrics go to the loggers.
        if not logs_this_step(trainer) or self.logging_interval == "epoch":
            return
        self._log(trainer, "step" if self.logging_interval is None else "any")

    def on_train_epoch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if self.logging_interval != "step":
            self._log(trainer, "epoch" if self.logging_interval is None else "any")

    def _log(self, trainer: Trainer, interval: str) -> None:
        stats = self._extract_stats(trainer, interval)
        if stats:
            step = batches_that_stepped(trainer)
            for logger in trainer.loggers:
                logger.log_metrics(stats, step=step)

    def _extract_stats(self, trainer: Trainer, interval: str) -> dict[str, float]:
        stats: dict[str, float] = {}
        configs = trainer.lr_scheduler_configs
        scheduler_names, seen, seen_types = self._find_names_from_schedulers(configs)
        self._remap_keys(scheduler_names)
        for names, config in zip(scheduler_names, configs, strict=False):
            if interval in (config.interval, "any"):
                stats.update(self._get_optimizer_stats(config.scheduler.optimizer, names))
        optimizer_names, without_scheduler = self._find_names_from_optimizers(trainer.optimizers, seen, seen_types)
        self._remap_keys(optimizer_names)
        for optimizer, names in zip(without_scheduler, optimizer_names, strict=False):
            stats.update(self._get_optimizer_stats(optimizer, names))
        device = trainer.fabric.device
        trainer.callback_metrics.update({name: torch.tensor(value, device=device) for name, value in stats.items()})
        return stats

    def _get_optimizer_stats(self, optimizer: Optimizer, names: list[str]) -> dict[str, float]:
        stats: dict[str, float] = {}
        use_betas = "betas" in optimizer.defaults
        for group, name in zip(optimizer.param_groups, names, strict=False):
            self.lrs[name].append(group["lr"])
            stats[name] = group["lr"]
            if self.log_momentum:
                momentum = group["betas"][0] if use_betas else group.get("momentum", 0)
                self.last_momentum_values[f"{name}-momentum"] = momentum
                stats[f"{name}-momentum"] = momentum
            if self.log_weight_decay:
                self.last_weight_decay_values[f"{name}-weight_decay"] = group["weight_decay"]
                stats[f"{name}-weight_decay"] = group["weight_decay"]
        return stats

    def _remap_keys(self, names: list[list[str]], token: str = "/pg1") -> None:
        # An optimizer that gained parameter groups mid-run: its single-group history moves to ".../pg1".
        for group_names in names:
            for new_name in group_names:
                old_name = new_name.replace(token, "")
                if token in new_name and old_name in self.lrs:
                    self.lrs[new_name] = self.lrs.pop(old_name)
                elif new_name not in self.lrs:
                    self.lrs[new_name] = []

    def _find_names_from_schedulers(
        self, configs: list[Any]
    ) -> tuple[list[list[str]], list[Optimizer], defaultdict[type, int]]:
        names: list[list[str]] = []
        seen: list[Optimizer] = []
        seen_types: defaultdict[type, int] = defaultdict(int)
        for config in configs:
            optimizer = config.scheduler.optimizer
            name = config.name if config.name is not None else "lr-" + type(optimizer).__name__
            names.append(self._check_duplicates_and_update_name(optimizer, name, seen, seen_types, config))
        return names, seen, seen_types

    def _find_names_from_optimizers(
        self, optimizers: list[Any], seen: list[Optimizer], seen_types: defaultdict[type, int]
    ) -> tuple[list[list[str]], list[Optimizer]]:
        names: list[list[str]] = []
        without_scheduler: list[Optimizer] = []
        for optimizer in optimizers:
            optimizer = _inner(optimizer)
            if any(optimizer is other for other in seen):
                continue
            name = "lr-" + type(optimizer).__name__
            names.append(self._check_duplicates_and_update_name(optimizer, name, seen, seen_types, None))
            without_scheduler.append(optimizer)
        return names, without_scheduler

    def _check_duplicates_and_update_name(
        self, optimizer: Optimizer, name: str, seen: list[Optimizer], seen_types: defaultdict[type, int], config: Any
    ) -> list[str]:
        seen.append(optimizer)
        optimizer_type = type(optimizer)
        if config is None or config.name is None:
            seen_types[optimizer_type] += 1
        groups = optimizer.param_groups
        duplicates = _duplicate_group_names(groups)
        if duplicates:
            raise MisconfigurationException(
                "A single `Optimizer` cannot have multiple parameter groups with identical "
                f"`name` values. {name} has duplicated parameter group names {duplicates}"
            )
        count = seen_types.get(optimizer_type, 0)
        if count > 1:
            name = f"{name}-{count - 1}"
        return [_with_group_suffix(name, groups, i) for i in range(len(groups))]


def _inner(optimizer: Any) -> Optimizer:
    # The optimizer the user built, under the Trainer's and Fabric's wrappers.
    while hasattr(optimizer, "optimizer") and not isinstance(optimizer, Optimizer):
        optimizer = optimizer.optimizer
    return unwrap(optimizer)


def _lacks(trainer: Trainer, key: str) -> bool:
    if trainer.lr_scheduler_configs:
        return any(key not in config.scheduler.optimizer.defaults for config in trainer.lr_scheduler_configs)
    return any(key not in _inner(optimizer).defaults for optimizer in trainer.optimizers)


def _duplicate_group_names(groups: list[dict[str, Any]]) -> set[str]:
    names = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
    return {name for name in names if names.count(name) > 1}


def _with_group_suffix(name: str, groups: list[dict[str, Any]], index: int) -> str:
    if len(groups) > 1:
        return f"{name}/{groups[index].get('name', f'pg{index + 1}')}"
    group_name = groups[index].get("name")
    return f"{name}/{group_name}" if group_name else name
