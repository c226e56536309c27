"""Turning whatever ``configure_optimizers`` returned into optimizers and scheduler configurations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.optim import Optimizer

from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.types import LRSchedulerConfig

_FORMS = (
    "an optimizer; a list of optimizers; ([optimizers], [schedulers]); "
    '{"optimizer": opt, "lr_scheduler": scheduler_or_config, "monitor": name}; or a list of such dicts'
)
_OPTIMIZER_KEYS = ("optimizer", "lr_scheduler", "monitor")
_CONFIG_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name", "reduce_on_plateau"}
# Keys manual optimization ignores (the module steps its schedulers itself), as Lightning ignores them.
_MANUAL_IGNORED_KEYS = ("reduce_on_plateau", "monitor", "strict")
_INTERVALS = ("step", "epoch")


#: fabricx's name for Lightning's `LRSchedulerConfig` (one class).
SchedulerConfig = LRSchedulerConfig


def parse_optimizers(
    returned: Any, manual: bool = False, custom_scheduler_step: bool = False
) -> tuple[list[Optimizer], list[SchedulerConfig]]:
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
        from fabricx.train.optim.no_optimizer import NoOptimizer
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
    configs = [_scheduler_config(raw, monitor, manual, custom_scheduler_step) for raw, monitor in raw_schedulers]
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
    if "optimizer" not in entry:
        raise MisconfigurationError(
            "Unknown configuration for model optimizers: "
            f"configure_optimizers returned a dict with keys {sorted(entry)}: it has no 'optimizer' key. Allowed "
            "keys are 'optimizer' (required), 'lr_scheduler' and 'monitor'."
        )
    unknown = set(entry) - set(_OPTIMIZER_KEYS)
    if unknown:
        # As Lightning: warned about and left out (a "scheduler" key meant as "lr_scheduler" trains without one).
        from fabricx.utilities.rank_zero import rank_zero_warn

        rank_zero_warn(
            f"Found unsupported keys in the optimizer configuration: {unknown}. They are ignored; the supported "
            f"keys are {list(_OPTIMIZER_KEYS)}.",
            category=RuntimeWarning,
        )
    if entry.get("lr_scheduler") is not None:
        schedulers.append((entry["lr_scheduler"], entry.get("monitor")))
    return entry["optimizer"]


def _scheduler_config(
    raw: Any, monitor: str | None, manual: bool = False, custom_step: bool = False
) -> SchedulerConfig:
    explicit_plateau = None
    if isinstance(raw, Mapping):
        explicit_plateau = raw.get("reduce_on_plateau")
        raw = _supported_keys(raw, manual)
        if "scheduler" not in raw:
            raise MisconfigurationError(
                'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler: '
                f"configure_optimizers returned an lr_scheduler config with keys {sorted(raw)}. "
                f"Allowed keys are {sorted(_CONFIG_KEYS)} ('scheduler' required)."
            )
        config = SchedulerConfig(
            scheduler=raw["scheduler"],
            interval=raw.get("interval", "epoch"),
            frequency=raw.get("frequency", 1),
            monitor=raw.get("monitor", None if manual else monitor),
            strict=raw.get("strict", True),
            name=raw.get("name"),
        )
    else:
        config = SchedulerConfig(scheduler=raw, monitor=monitor)
    scheduler = config.scheduler
    if not all(callable(getattr(scheduler, name, None)) for name in ("state_dict", "load_state_dict")):
        raise TypeError(
            f"The provided lr scheduler `{type(scheduler).__name__}` is invalid. It should have `state_dict` and "
            "`load_state_dict` methods defined (they are what a checkpoint saves and restores)."
        )
    if not manual and not custom_step and not callable(getattr(scheduler, "step", None)):
        raise MisconfigurationError(
            f"The provided lr scheduler `{type(scheduler).__name__}` doesn't follow PyTorch's LRScheduler API. You "
            "should override the `LightningModule.lr_scheduler_step` hook with your own logic if you are using a "
            f"custom LR scheduler: configure_optimizers returned {type(scheduler).__name__}, which has no step()."
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

    plateau = isinstance(scheduler, ReduceLROnPlateau)
    config.reduce_on_plateau = plateau if explicit_plateau is None or manual else bool(explicit_plateau)
    if config.reduce_on_plateau and not config.monitor and not manual:
        raise MisconfigurationError(
            "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used: "
            "configure_optimizers returned a ReduceLROnPlateau without a metric to watch. Return "
            '{"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}.'
        )
    return config


def _supported_keys(raw: Mapping[str, Any], manual: bool) -> dict[str, Any]:
    """The scheduler dict without the keys Lightning ignores, with its warnings."""
    from fabricx.utilities.rank_zero import rank_zero_warn

    extra = set(raw) - _CONFIG_KEYS
    if extra:
        rank_zero_warn(
            f"Found unsupported keys in the lr scheduler dict: {extra}. HINT: remove them from the output of "
            f"`configure_optimizers` (the supported keys are {sorted(_CONFIG_KEYS)}).",
            category=RuntimeWarning,
        )
    kept = {key: value for key, value in raw.items() if key in _CONFIG_KEYS}
    if manual:
        ignored = [key for key in raw if key in _MANUAL_IGNORED_KEYS]
        if ignored:
            rank_zero_warn(
                f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored. You need to "
                "call `lr_scheduler.step()` manually in manual optimization.",
                category=RuntimeWarning,
            )
        kept = {key: value for key, value in kept.items() if key not in _MANUAL_IGNORED_KEYS}
    return kept


def _error(returned: Any, problem: str) -> MisconfigurationError:
    shown = repr(returned)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return MisconfigurationError(
        f"Unknown configuration for model optimizers: configure_optimizers returned {shown}, but {problem}. "
        f"Return {_FORMS}."
    )
