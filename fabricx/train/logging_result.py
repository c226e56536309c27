"""What ``self.log`` records: step values, epoch aggregates and torchmetrics ``Metric`` objects.

One `ResultCollection` exists per stage (training, validation, test). The per-step path only
stores a reference (and, for epoch aggregates, adds into a running tensor); nothing is converted to
a Python number or synchronised until values are read at a logging step or at epoch end.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fabricx.utilities.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from fabricx.fabric import Fabric

_REDUCE_NAMES = ("mean", "sum", "max", "min")


def _reduce_name(reduce_fx: Any, name: str, hook: str) -> str:
    if isinstance(reduce_fx, str) and reduce_fx in _REDUCE_NAMES:
        return reduce_fx
    aliases = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min"}
    if reduce_fx in aliases:
        return aliases[reduce_fx]
    raise MisconfigurationError(
        f"self.log({name!r}, reduce_fx={reduce_fx!r}) in {hook}: reduce_fx must be one of {list(_REDUCE_NAMES)} "
        "(or torch.mean/sum/max/min). For another reduction, log a torchmetrics Metric instead."
    )


def _is_metric(value: Any) -> bool:
    torchmetrics = sys.modules.get("torchmetrics")  # a Metric can only exist if torchmetrics was imported
    return torchmetrics is not None and isinstance(value, torchmetrics.Metric)


def _batch_size(batch: Any) -> int:
    if isinstance(batch, Tensor):
        return int(batch.shape[0]) if batch.ndim > 0 else 1
    if isinstance(batch, Mapping):
        for item in batch.values():
            return _batch_size(item)
    if isinstance(batch, (list, tuple)):
        for item in batch:
            return _batch_size(item)
    return 1


class _Entry:
    """One logged name: its options, its latest step value and its running epoch aggregate."""

    __slots__ = (
        "logger",
        "metric",
        "metric_path",
        "name",
        "on_epoch",
        "on_step",
        "prog_bar",
        "reduce",
        "seen",
        "stamp",
        "step_value",
        "sync_dist",
        "total",
        "weight",
    )

    def __init__(
        self, name: str, prog_bar: bool, logger: bool, on_step: bool, on_epoch: bool, reduce: str, sync_dist: bool
    ) -> None:
        self.name = name
        self.prog_bar = prog_bar
        self.logger = logger
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.reduce = reduce
        self.sync_dist = sync_dist
        self.metric: Any = None
        self.metric_path: str | None = None
        self.step_value: Any = None
        self.stamp = -1
        self.total: Any = None
        self.weight: Any = 0
        self.seen = False

    @property
    def step_name(self) -> str:
        return f"{self.name}_step" if self.on_epoch else self.name

    @property
    def epoch_name(self) -> str:
        return f"{self.name}_epoch" if self.on_step else self.name

    def options(self) -> dict[str, Any]:
        return {
            "prog_bar": self.prog_bar,
            "logger": self.logger,
            "on_step": self.on_step,
            "on_epoch": self.on_epoch,
            "reduce": self.reduce,
            "sync_dist": self.sync_dist,
        }


class ResultCollection:
    """The values logged during one stage (``"train"``, ``"validate"``, ``"test"``).

    Example:
        ```python
        results = ResultCollection("train", training=True)
        results.new_batch(batch)
        results.log("loss", loss, False, True, None, None, "mean", False, None)
        results.step_metrics()  # {"loss": tensor(...)}
        ```
    """

    def __init__(self, stage: str, training: bool, module: torch.nn.Module | None = None) -> None:
        self.stage = stage
        self.training = training
        self.module = module
        self.entries: dict[str, _Entry] = {}
        #: True inside steps and batch hooks, False inside epoch-level hooks.
        self.in_step = True
        self.hook = "training_step" if training else f"{stage}_step"
        #: Appended to names when several evaluation loaders are in use ("/dataloader_idx_1").
        self.suffix = ""
        self.stamp = 0
        self._batch: Any = None
        self._batch_size: int | None = None

    # -- per step ----------------------------------------------------------------------------------------
    def new_batch(self, batch: Any) -> None:
        self.stamp += 1
        self._batch = batch
        self._batch_size = None

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: Any,
        sync_dist: bool,
        batch_size: int | None,
    ) -> None:
        key = name + self.suffix if self.suffix else name
        entry = self.entries.get(key)
        if entry is None:
            entry = self._create(key, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)
        entry.seen = True
        if entry.metric_path is not None or entry.metric is not None:
            if not _is_metric(value):
                raise MisconfigurationError(
                    f"self.log({name!r}) in {self.hook} was first given a torchmetrics Metric and now a "
                    f"{type(value).__name__}. Log a Metric under one name and plain values under another."
                )
            entry.metric = value
            entry.stamp = self.stamp
            return
        if isinstance(value, Tensor):
            value = value.detach()
        elif not isinstance(value, (int, float)):
            raise _bad_value(name, value, self.hook)
        if entry.on_step:
            entry.step_value = value
            entry.stamp = self.stamp
        if entry.on_epoch:
            reduce = entry.reduce
            if reduce == "mean":
                if not self.in_step:
                    size = 1
                elif batch_size is not None:
                    size = batch_size
                else:
                    size = self._batch_size
                    if size is None:
                        size = self._batch_size = _batch_size(self._batch)
                entry.total = value * size if entry.total is None else entry.total + value * size
                entry.weight += size
            elif entry.total is None:
                entry.total = value
            elif reduce == "sum":
                entry.total = entry.total + value
            elif reduce == "max":
                entry.total = torch.maximum(torch.as_tensor(entry.total), torch.as_tensor(value))
            else:
                entry.total = torch.minimum(torch.as_tensor(entry.total), torch.as_tensor(value))

    def _create(
        self,
        key: str,
        value: Any,
        prog_bar: bool,
        logger: bool,
        on_step: bool | None,
        on_epoch: bool | None,
        reduce_fx: Any,
        sync_dist: bool,
    ) -> _Entry:
        if not isinstance(key, str) or not key:
            raise MisconfigurationError(f"self.log() in {self.hook} needs a non-empty string name, got {key!r}.")
        reduce = _reduce_name(reduce_fx, key, self.hook)
        if not self.in_step:
            if on_step:
                raise MisconfigurationError(
                    f"self.log({key!r}, on_step=True) in {self.hook}: there is no step in an epoch-level hook. "
                    "Log it with on_epoch=True (the default there), or log it from a *_step hook."
                )
            on_step, on_epoch = False, True
        else:
            if on_step is None:
                on_step = self.training
            if on_epoch is None:
                on_epoch = not self.training
        if not on_step and not on_epoch:
            raise MisconfigurationError(
                f"self.log({key!r}) in {self.hook} has on_step=False and on_epoch=False, so it would never be "
                "recorded. Set at least one of them to True."
            )
        entry = _Entry(key, bool(prog_bar), bool(logger), bool(on_step), bool(on_epoch), reduce, bool(sync_dist))
        if _is_metric(value):
            entry.metric = value
            entry.metric_path = self._metric_path(value)
        elif isinstance(value, Tensor) and value.numel() != 1:
            raise MisconfigurationError(
                f"self.log({key!r}) in {self.hook} got a tensor of shape {tuple(value.shape)}; only single "
                "values can be logged. Reduce it first (e.g. .mean()) or log a torchmetrics Metric."
            )
        elif not isinstance(value, (Tensor, int, float)):
            raise _bad_value(key, value, self.hook)
        self.entries[key] = entry
        return entry

    def _metric_path(self, metric: Any) -> str | None:
        if self.module is None:
            return None
        for path, submodule in self.module.named_modules():
            if submodule is metric:
                return path
        return None

    # -- reading ------------------------------------------------------------------------------------------
    def step_metrics(
        self, for_logger: bool = False, prog_bar_only: bool = False, naming: str = "step", sync: Fabric | None = None
    ) -> dict[str, Any]:
        """The values logged at the current step.

        ``naming="step"`` names them ``name_step`` where the name is also aggregated per epoch,
        ``"base"`` uses the plain name, ``"both"`` gives both. With ``sync`` (a Fabric with several
        processes), ``sync_dist`` values are averaged across processes (every process must call this).
        """
        out: dict[str, Any] = {}
        stamp = self.stamp
        for entry in self.entries.values():
            if not entry.on_step or entry.stamp != stamp:
                continue
            if (for_logger and not entry.logger) or (prog_bar_only and not entry.prog_bar):
                continue
            if entry.metric is not None:
                value = getattr(entry.metric, "_forward_cache", None)
                if value is None:
                    continue
            else:
                value = entry.step_value
                if sync is not None and entry.sync_dist:
                    # A copy: all_reduce works in place, and the logged tensor may be the user's own.
                    copy = value.clone() if isinstance(value, Tensor) else value
                    value = sync.all_reduce(copy, reduce_op="mean" if entry.reduce == "mean" else entry.reduce)
            if naming != "base":
                out[entry.step_name] = value
            if naming != "step":
                out[entry.name] = value
        return out

    def compute_epoch(self, fabric: Fabric | None) -> dict[str, tuple[Any, _Entry]]:
        """Reduce every epoch aggregate (across processes where asked) and reset the collection.

        Returns ``{epoch_name: (value, entry)}``; entries keep their options for the next epoch.
        """
        out: dict[str, tuple[Any, _Entry]] = {}
        distributed = fabric is not None and fabric.world_size > 1
        for entry in self.entries.values():
            if entry.metric is not None:
                if entry.seen and entry.on_epoch:
                    out[entry.epoch_name] = (entry.metric.compute(), entry)
                if entry.seen:
                    entry.metric.reset()
            elif entry.on_epoch and entry.total is not None:
                total = entry.total
                if entry.reduce == "mean":
                    weight = entry.weight
                    if entry.sync_dist and distributed:
                        assert fabric is not None  # distributed implies a Fabric
                        device = fabric.device
                        pair = torch.stack(
                            [
                                torch.as_tensor(total, dtype=torch.float64, device=device).reshape(()),
                                torch.as_tensor(weight, dtype=torch.float64, device=device).reshape(()),
                            ]
                        )
                        pair = fabric.all_reduce(pair, reduce_op="sum")
                        value = (pair[0] / pair[1]).to(_dtype_of(total))
                    else:
                        value = total / weight
                elif entry.sync_dist and distributed:
                    assert fabric is not None
                    value = fabric.all_reduce(torch.as_tensor(total, device=fabric.device), reduce_op=entry.reduce)
                else:
                    value = total
                out[entry.epoch_name] = (value, entry)
            entry.total = None
            entry.weight = 0
            entry.seen = False
        return out

    def reset(self) -> None:
        """Forget this stage's aggregates (and reset its metrics) without computing them."""
        for entry in self.entries.values():
            if entry.metric is not None and entry.seen:
                entry.metric.reset()
            entry.total = None
            entry.weight = 0
            entry.seen = False
            entry.stamp = -1

    # -- checkpoints --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        entries = {}
        for key, entry in self.entries.items():
            item: dict[str, Any] = {"options": entry.options(), "seen": entry.seen}
            if entry.metric is not None or entry.metric_path is not None:
                if entry.metric_path is None:
                    continue  # a Metric outside the module cannot be found again after a restart
                item["metric_path"] = entry.metric_path
                metric = entry.metric
                if metric is not None:
                    item["metric_state"] = {name: _plain(value) for name, value in metric.metric_state.items()}
                    item["update_count"] = int(metric._update_count)
            else:
                item["total"] = entry.total
                item["weight"] = entry.weight
            entries[key] = item
        return {"entries": entries}

    def load_state_dict(self, state_dict: dict[str, Any], device: torch.device | None = None) -> None:
        self.entries = {}
        for key, item in state_dict.get("entries", {}).items():
            options = item["options"]
            entry = _Entry(key, **options)
            entry.seen = bool(item.get("seen", False))
            if "metric_path" in item:
                entry.metric_path = str(item["metric_path"])
                entry.metric = self._find_metric(entry.metric_path)
                if entry.metric is not None and "metric_state" in item:
                    _restore_metric(entry.metric, item["metric_state"], int(item.get("update_count", 0)))
            else:
                total = item.get("total")
                if isinstance(total, Tensor) and device is not None:
                    total = total.to(device)
                entry.total = total
                entry.weight = item.get("weight", 0)
            self.entries[key] = entry

    def _find_metric(self, path: str) -> Any:
        if self.module is None:
            return None
        try:
            return self.module.get_submodule(path) if path else self.module
        except AttributeError:
            return None


def _dtype_of(value: Any) -> torch.dtype:
    return value.dtype if isinstance(value, Tensor) and value.is_floating_point() else torch.get_default_dtype()


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [item.detach() for item in value]
    return value.detach() if isinstance(value, Tensor) else value


def _restore_metric(metric: Any, state: dict[str, Any], update_count: int) -> None:
    device = getattr(metric, "device", None)
    for name, value in state.items():
        if isinstance(value, list):
            value = [item.to(device) if device is not None else item for item in value]
        elif isinstance(value, Tensor) and device is not None:
            value = value.to(device)
        setattr(metric, name, value)
    metric._update_count = update_count
    metric._computed = None


def _bad_value(name: str, value: Any, hook: str) -> MisconfigurationError:
    return MisconfigurationError(
        f"self.log({name!r}, ...) in {hook} got a {type(value).__name__}; allowed are a tensor with one "
        "element, an int or float, or a torchmetrics Metric."
    )


def to_float(value: Any) -> Any:
    """A Python number from a one-element tensor (other values unchanged)."""
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    return value


__all__ = ["ResultCollection", "to_float"]
