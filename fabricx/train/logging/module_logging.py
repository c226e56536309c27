"""``self.log`` inside a Trainer run: the value checks, the hook's levels, then the loop's collection.

Example:
    ```python
    record(module, trainer, "training_step", "loss", loss, ...)  # what TrainModule.log calls
    ```
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fabricx._compat.torch_internals import detached_copy
from fabricx.train.logging.log_hooks import logging_levels
from fabricx.train.logging.logging_result import STEP_SCALARS, is_metric
from fabricx.train.states import RunningStage
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_warn

_PREDICTING = RunningStage.PREDICTING  # an Enum member read through its class costs a lookup; self.log runs per step


def is_metric_collection(value: Any) -> bool:
    """Whether ``value`` is a torchmetrics ``MetricCollection`` (without importing torchmetrics)."""
    import sys

    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(value, torchmetrics.MetricCollection)


def checked_value(name: str, value: Any, module: Any) -> Any:
    """A Metric as given; a number or one-element tensor as a detached 0-d tensor; else `ValueError`.

    A number becomes a tensor on ``module.device`` (read only then: a tensor, the common case, needs no device).
    """
    if isinstance(value, Tensor):
        # The usual value (a loss, an accuracy), checked without the ABC checks below.
        tensor = detached_copy(value)
    else:
        if isinstance(value, Mapping) and any(isinstance(item, Mapping) for item in value.values()):
            raise ValueError(f"`self.log({name}, {value})` was called, but nested dictionaries cannot be logged")
        if is_metric(value):
            return value
        if not isinstance(value, numbers.Number):
            raise ValueError(
                f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged: "
                "log a number, a one-element tensor or a torchmetrics Metric (log_dict for several values)."
            )
        dtype = torch.get_default_dtype()
        tensor = torch.tensor(
            value, device=module.device, dtype=dtype if dtype in (torch.float32, torch.float64) else None
        )
    if tensor.ndim == 0:
        return tensor  # one element already, nothing to squeeze
    if tensor.numel() != 1:
        raise ValueError(
            f"`self.log({name}, {value})` was called, but the tensor must have a single element. You can try "
            f"doing `self.log({name}, {value}.mean())`"
        )
    return tensor.squeeze()


def find_metric_attribute(module: torch.nn.Module, name: str, metric: Any) -> str:
    """The attribute path of a logged ``Metric`` in ``module`` (how a restart finds it again)."""
    found = {id(sub): path for path, sub in module.named_modules() if is_metric(sub)}
    path = found.get(id(metric))
    if path is not None:
        return path
    if not found:
        raise MisconfigurationException(
            "Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged. You can fix "
            f"this by setting an attribute for the metric in your `LightningModule` (self.log({name!r}) was "
            "given a Metric the module does not hold, e.g. `self.accuracy = Accuracy(...)` in __init__)."
        )
    raise MisconfigurationException(
        "Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged. You can fix this "
        f"by calling `self.log({name}, ..., metric_attribute=name)` where `name` is one of {list(found.values())}"
    )


def record(
    module: Any,
    trainer: Any,
    current_fx: str | None,
    name: str,
    value: Any,
    prog_bar: bool,
    logger: bool | None,
    on_step: bool | None,
    on_epoch: bool | None,
    reduce_fx: Any,
    sync_dist: bool,
    add_dataloader_idx: bool,
    batch_size: int | None,
    metric_attribute: str | None,
) -> None:
    """What ``module.log(name, value, ...)`` does with the module attached to ``trainer`` (or to none), called in
    the hook ``current_fx`` (the module's ``_current_fx_name``; ``None``: the loop's step).

    A call made before with the same hook, name and options (every step's) goes straight to its entry: the checks
    below depend on nothing else, and they passed then.
    """
    scalar = isinstance(value, Tensor) and value.ndim == 0  # the usual value (a loss, an accuracy): no check
    if not scalar:
        value = checked_value(name, value, module)
    if trainer is None:
        rank_zero_warn(
            "You are trying to `self.log()` but the `self.trainer` reference is not registered on the model yet. "
            f"This is most likely because the model hasn't been passed to the `Trainer`: self.log({name!r}) "
            "records nothing outside Trainer.fit/validate/test."
        )
        return
    if trainer.barebones:
        from fabricx.train.config.barebones import LOG_WARNING

        rank_zero_warn(LOG_WARNING)
        return
    results = trainer.run_context.logger_connector.results
    stage = trainer.state.stage  # `is_stage`, inline: this runs in every self.log
    if results is None or (stage is _PREDICTING if type(stage) is RunningStage else stage == _PREDICTING):
        raise MisconfigurationException(
            f"You are trying to `self.log({name!r})` but the loop's result collection is not registered yet. "
            "This is most likely because you are trying to log in a `predict` hook, but it doesn't support "
            "logging: return what you want to keep from predict_step instead."
        )
    fx = current_fx or results.hook
    if (prog_bar is False and logger is None and on_step is None and on_epoch is None and sync_dist is False
            and add_dataloader_idx is True and metric_attribute is None and reduce_fx == "mean"):
        call: Any = (fx, name, results.dataloader_idx)  # every option its default (the usual call): a shorter key
    else:
        call = (fx, name, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, add_dataloader_idx,
                metric_attribute, results.dataloader_idx)
    try:
        entry = results.resolved.get(call)
    except TypeError:  # an option that is not even hashable: the checks below say what is wrong with it
        entry = call = None
    if entry is not None and entry.metric is None and (scalar or isinstance(value, Tensor)):
        if logger and not trainer.loggers:
            _warn_no_logger(name)
        if scalar:
            if entry.on_step and not entry.on_epoch and entry.fabric is None and type(value) is Tensor and value.is_cpu:
                kind = STEP_SCALARS.get(value.dtype)
                if kind is not None:  # kept as its number: no tensor copy (see `StepScalar`)
                    entry.step_value = value.item()
                    entry.step_kind = kind
                    entry.has_reset = False
                    entry.computed = None
                    return
            value = detached_copy(value)
        results.update(entry, value, batch_size)
        return
    if scalar:
        value = detached_copy(value)
    on_step, on_epoch = logging_levels(fx, on_step, on_epoch)
    if add_dataloader_idx and "/dataloader_idx_" in name:
        raise MisconfigurationException(
            f"You called `self.log` with the key `{name}` but it should not contain information about "
            "`dataloader_idx` when `add_dataloader_idx=True`: the suffix is added when several loaders run. "
            "Drop it from the name, or pass add_dataloader_idx=False."
        )
    if metric_attribute is None and not isinstance(value, Tensor):  # a Metric: checked_value gives tensors else
        metric_attribute = find_metric_attribute(module, name, value)
    if logger and not trainer.loggers:
        _warn_no_logger(name)
    entry = results.log(
        fx, name, value, prog_bar, True if logger is None else logger, on_step, on_epoch, reduce_fx,
        trainer.fabric if sync_dist and trainer.world_size > 1 else None, batch_size, add_dataloader_idx,
        metric_attribute,
    )
    if call is not None and entry.metric is None:  # a Metric's entry takes the checks each time
        results.resolved[call] = entry


def _warn_no_logger(name: str) -> None:
    rank_zero_warn(
        f"You called `self.log({name!r}, ..., logger=True)` but have no logger configured. You can enable one "
        "by doing `Trainer(logger=ALogger(...))`; the value is still in trainer.logged_metrics."
    )


def log_through_fabric(fabric: Any, metrics: dict[str, Any], logger: bool | None, call: str) -> None:
    """`self.log`/`self.log_dict` of a module set up by a plain Fabric: checked as Lightning checks them, then one
    `fabric.log_dict` (``logger=False`` logs nothing)."""
    if logger is False:
        return
    if any(isinstance(value, Mapping) for value in metrics.values()):
        raise ValueError(f"`{call}` was called, but nested dictionaries cannot be logged: log each value by name.")
    for value in metrics.values():
        if not isinstance(value, (numbers.Number, Tensor)):
            raise ValueError(
                f"`{call}` was called, but `{type(value).__name__}` values cannot be logged: log a number or a "
                "tensor."
            )
    fabric.log_dict(metrics)


__all__ = ["checked_value", "find_metric_attribute", "is_metric_collection", "log_through_fabric", "record"]
