"""Turning whatever ``configure_optimizers`` returned into optimizers and scheduler configurations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch.optim import Optimizer

from fabricx.utilities.exceptions import MisconfigurationError

_FORMS = (
    "an optimizer; a list of optimizers; ([optimizers], [schedulers]); "
    '{"optimizer": opt, "lr_scheduler": scheduler_or_config, "monitor": name}; or a list of such dicts'
)
_CONFIG_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name"}
_INTERVALS = ("step", "epoch")


@dataclass
class SchedulerConfig:
    """One LR scheduler and when to step it.

    ``interval="step"`` steps after every ``frequency``-th optimizer step; ``"epoch"`` after every
    ``frequency``-th epoch. ``monitor`` names the metric a ``ReduceLROnPlateau`` steps with.
    """

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None
    reduce_on_plateau: bool = False


def parse_optimizers(returned: Any, manual: bool = False) -> tuple[list[Optimizer], list[SchedulerConfig]]:
    """Optimizers and scheduler configurations from a ``configure_optimizers`` return value.

    Under manual optimization (``manual=True``) the user steps schedulers, so a ``ReduceLROnPlateau``
    needs no ``monitor``.

    Example:
        ```python
        optimizers, schedulers = parse_optimizers({"optimizer": opt, "lr_scheduler": sched})
        ```
    """
    optimizers: list[Any]
    raw_schedulers: list[tuple[Any, str | None]] = []
    if returned is None:
        from fabricx.train.no_optimizer import NoOptimizer
        from fabricx.utilities.rank_zero import rank_zero_warn

        rank_zero_warn(
            "`LightningModule.configure_optimizers` returned `None`, this fit will run with no optimizer: the "
            "steps run, the weights do not change. Return an optimizer to train."
        )
        return [NoOptimizer()], []
    if isinstance(returned, Optimizer):
        optimizers = [returned]
    elif isinstance(returned, Mapping):
        optimizers = [_optimizer_from_dict(returned, raw_schedulers)]
    elif isinstance(returned, Sequence) and not isinstance(returned, str):
        items = list(returned)
        if not items:
            raise _error(returned, "it is empty")
        if (
            len(items) == 2
            and isinstance(items[0], Sequence)
            and isinstance(items[1], Sequence)
            and not isinstance(items[0], str)
        ):
            optimizers = list(items[0])
            raw_schedulers = [(s, None) for s in items[1]]
        elif all(isinstance(item, Mapping) for item in items):
            optimizers = [_optimizer_from_dict(item, raw_schedulers) for item in items]
        elif all(isinstance(item, Optimizer) for item in items):
            optimizers = items
        else:
            kinds = ", ".join(type(item).__name__ for item in items)
            raise _error(returned, f"it is a sequence of [{kinds}]")
    else:
        raise _error(returned, f"it is a {type(returned).__name__}")
    for optimizer in optimizers:
        if not isinstance(optimizer, Optimizer):
            raise _error(returned, f"{type(optimizer).__name__} is not a torch.optim.Optimizer")
    if not optimizers:
        raise _error(returned, "it holds no optimizer")
    configs = [_scheduler_config(raw, monitor, manual) for raw, monitor in raw_schedulers]
    owned = {id(opt) for opt in optimizers}
    for config in configs:
        target = getattr(config.scheduler, "optimizer", None)
        if target is not None and id(target) not in owned:
            raise MisconfigurationError(
                "Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`: "
                f"configure_optimizers returned a {type(config.scheduler).__name__} whose optimizer is not one of "
                "the returned optimizers. Build each scheduler on an optimizer you return."
            )
    return optimizers, configs


def _optimizer_from_dict(entry: Mapping[str, Any], schedulers: list[tuple[Any, str | None]]) -> Any:
    unknown = set(entry) - {"optimizer", "lr_scheduler", "monitor"}
    if "optimizer" not in entry or unknown:
        problem = "it has no 'optimizer' key" if "optimizer" not in entry else f"unknown keys {sorted(unknown)}"
        raise MisconfigurationError(
            "Unknown configuration for model optimizers: "
            f"configure_optimizers returned a dict with keys {sorted(entry)}: {problem}. Allowed keys are "
            "'optimizer' (required), 'lr_scheduler' and 'monitor'."
        )
    if entry.get("lr_scheduler") is not None:
        schedulers.append((entry["lr_scheduler"], entry.get("monitor")))
    return entry["optimizer"]


def _scheduler_config(raw: Any, monitor: str | None, manual: bool = False) -> SchedulerConfig:
    if isinstance(raw, Mapping):
        unknown = set(raw) - _CONFIG_KEYS
        if "scheduler" not in raw or unknown:
            problem = "it has no 'scheduler' key" if "scheduler" not in raw else f"unknown keys {sorted(unknown)}"
            raise MisconfigurationError(
                'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler: '
                f"configure_optimizers returned an lr_scheduler config with keys {sorted(raw)}: {problem}. "
                f"Allowed keys are {sorted(_CONFIG_KEYS)} ('scheduler' required)."
            )
        config = SchedulerConfig(
            scheduler=raw["scheduler"],
            interval=raw.get("interval", "epoch"),
            frequency=raw.get("frequency", 1),
            monitor=raw.get("monitor", monitor),
            strict=raw.get("strict", True),
            name=raw.get("name"),
        )
    else:
        config = SchedulerConfig(scheduler=raw, monitor=monitor)
    scheduler = config.scheduler
    if not callable(getattr(scheduler, "step", None)) or not callable(getattr(scheduler, "state_dict", None)):
        raise MisconfigurationError(
            f"The provided lr scheduler `{type(scheduler).__name__}` doesn't follow PyTorch's LRScheduler API: "
            f"configure_optimizers returned {type(scheduler).__name__} as an LR scheduler; a scheduler needs "
            "step() and state_dict() (e.g. torch.optim.lr_scheduler.StepLR)."
        )
    if config.interval not in _INTERVALS:
        raise MisconfigurationError(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "{config.interval}": '
            f"configure_optimizers returned an lr_scheduler config with interval={config.interval!r}."
        )
    if isinstance(config.frequency, bool) or not isinstance(config.frequency, int) or config.frequency < 1:
        raise MisconfigurationError(
            f"configure_optimizers: lr_scheduler frequency={config.frequency!r}; it must be an int >= 1."
        )
    from torch.optim.lr_scheduler import ReduceLROnPlateau

    config.reduce_on_plateau = isinstance(scheduler, ReduceLROnPlateau)
    if config.reduce_on_plateau and not config.monitor and not manual:
        raise MisconfigurationError(
            "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used: "
            "configure_optimizers returned a ReduceLROnPlateau without a metric to watch. Return "
            '{"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}.'
        )
    return config


def _error(returned: Any, problem: str) -> MisconfigurationError:
    shown = repr(returned)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return MisconfigurationError(
        f"Unknown configuration for model optimizers: configure_optimizers returned {shown}, but {problem}. "
        f"Return {_FORMS}."
    )
