"""What ``self.log`` records: step values, epoch aggregates and torchmetrics ``Metric`` objects.

One `ResultCollection` exists per loop (training, validation, test). An entry is one name logged in one hook
(and one evaluation loader), as in Lightning: ``"loss"`` logged in ``training_step`` and in
``on_train_epoch_end`` are two entries. The per-step path stores the value and, for epoch aggregates, adds
it into a running tensor; nothing is converted to a Python number until it is read.

`ResultCollection.metrics` gives the three views the Trainer keeps (Lightning's names):
``log`` (``name_step``/``name_epoch`` when logged with both ``on_step`` and ``on_epoch``), ``callback`` (also
the plain name; step values only in training) and ``pbar`` (``prog_bar=True`` entries, forked names).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from fabricx.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fabricx.fabric import Fabric

_REDUCE_NAMES = ("mean", "sum", "max", "min")
_FLOAT_DTYPES = (torch.float32, torch.float64)  # looked up once: every logged value's dtype is checked
_SUFFIX = "/dataloader_idx_{}"
_STEP_OF_STAGE = {"validate": "validation_step"}  # the stage is the entry point's name, the step Lightning's


def reduce_name(reduce_fx: Any) -> str:
    """``"mean"``, ``"sum"``, ``"max"`` or ``"min"`` for what ``self.log(reduce_fx=...)`` accepts.

    Strings in any case (and ``"avg"``), the torch functions and Python's ``sum``/``max``/``min`` are
    accepted, as in Lightning; anything else raises `MisconfigurationException`.
    """
    if isinstance(reduce_fx, str):
        name = reduce_fx.lower()
        name = "mean" if name == "avg" else name
        if name in _REDUCE_NAMES:
            return name
    else:
        aliases = {torch.mean: "mean", torch.sum: "sum", sum: "sum", torch.max: "max", max: "max"}
        aliases.update({torch.min: "min", min: "min"})
        for function, name in aliases.items():
            if reduce_fx is function:
                return name
    raise MisconfigurationException(
        "Only `self.log(..., reduce_fx={min,max,mean,sum})` are supported. If you need a custom reduction, "
        f"please log a `torchmetrics.Metric` instance instead. Found: {reduce_fx}"
    )


def is_metric(value: Any) -> bool:
    """Whether ``value`` is a torchmetrics ``Metric`` (without importing torchmetrics)."""
    if isinstance(value, Tensor):
        return False  # the common case, answered without the ABC check of torchmetrics' Metric
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


def _float_dtype() -> torch.dtype:
    """The default dtype, but no lower than float32 (aggregates keep their precision)."""
    dtype = torch.get_default_dtype()
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


class StepScalar(float):
    """A step value of a CPU float tensor kept as the number it holds, until something reads it as a tensor.

    ``self.log`` runs every step, and a detached copy of the tensor costs several times what the rest of the call
    does; the value (a float32 or float64 number, exact as a Python float) is turned back into a tensor of its
    dtype when the metrics are read (`tensors_in`), which is far rarer. Its subclasses say the dtype.

    Example:
        ```python
        tensors_in({"loss": STEP_SCALARS[torch.float32](0.5)})  # {"loss": tensor(0.5000)}
        ```
    """

    dtype: ClassVar[torch.dtype]

    def tensor(self) -> Tensor:
        """The CPU tensor of `dtype` holding this number (exactly: it came from one)."""
        return torch.tensor(float(self), dtype=self.dtype)


class _Float32Step(StepScalar):
    dtype = torch.float32


class _Float64Step(StepScalar):
    dtype = torch.float64


#: The `StepScalar` type of each dtype a step value can be kept as a number in.
STEP_SCALARS: dict[torch.dtype, type[StepScalar]] = {torch.float32: _Float32Step, torch.float64: _Float64Step}


def tensors_in(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with every `StepScalar` replaced, in place, by a tensor of its dtype (Lightning's values)."""
    for name, value in metrics.items():
        if isinstance(value, StepScalar):
            metrics[name] = value.tensor()
    return metrics


class Metrics(NamedTuple):
    """The three views of a collection: for callbacks, for the loggers, for the progress bar."""

    callback: dict[str, Any]
    log: dict[str, Any]
    pbar: dict[str, Any]


class _Entry:
    """One name logged in one hook: its options, its latest step value and its running epoch aggregate."""

    __slots__ = (
        "add_dataloader_idx",
        "computed",
        "dataloader_idx",
        "fabric",
        "fx",
        "given",
        "has_reset",
        "logger",
        "metric",
        "metric_attribute",
        "name",
        "on_epoch",
        "on_step",
        "options",
        "prog_bar",
        "read_names",
        "reduce",
        "step_kind",
        "step_value",
        "sync_dist",
        "total",
        "weight",
    )

    def __init__(self, fx: str, name: str, options: tuple[Any, ...]) -> None:
        self.fx = fx
        self.name = name
        #: The normalized options, in `log`'s order (compared with a later call's, and saved as they are).
        self.options = options
        (
            self.prog_bar,
            self.logger,
            self.on_step,
            self.on_epoch,
            self.reduce,
            self.sync_dist,
            self.add_dataloader_idx,
            self.dataloader_idx,
            self.metric_attribute,
        ) = options
        self.metric: Any = None
        self.fabric: Fabric | None = None
        #: The latest step value: a tensor, or a CPU float tensor's number (a plain float, of `step_kind`'s dtype).
        self.step_value: Any = None
        self.step_kind: type[StepScalar] = _Float32Step
        self.total: Any = None
        self.weight: Any = 0
        self.computed: Any = None
        self.has_reset = False
        #: The arguments of the last `log` call as given, before they were normalized into the options: the same
        #: arguments again (every step) need no new check.
        self.given: tuple[Any, ...] | None = None
        #: `names(False)` and `names(True)`, built once (the options never change).
        self.read_names = (self._names(False), self._names(True))

    def names(self, on_step: bool) -> tuple[str, str]:
        """``(name, forked name)``: ``name_step``/``name_epoch`` when logged with both, plus the loader suffix."""
        return self.read_names[on_step]

    def _names(self, on_step: bool) -> tuple[str, str]:
        name = self.name
        forked = f"{name}_{'step' if on_step else 'epoch'}" if self.on_step and self.on_epoch else name
        if self.add_dataloader_idx and self.dataloader_idx is not None:
            suffix = _SUFFIX.format(self.dataloader_idx)
            return name + suffix, forked + suffix
        return name, forked

    def accumulate(self, value: Tensor, size: int) -> None:
        """Add a plain value into the epoch aggregate (``size``: its weight in a mean)."""
        reduce = self.reduce
        total = self.total
        if reduce == "mean":
            self.total = value * size if total is None else total + value * size
            self.weight += size
        elif total is None:
            self.total = value
        elif reduce == "sum":
            self.total = total + value
        elif reduce == "max":
            self.total = torch.maximum(total, value)
        else:
            self.total = torch.minimum(total, value)

    def value(self, on_step: bool) -> Any:
        """The step value (``on_step``) or the epoch value, ``None`` where this entry has none."""
        if on_step:
            if not self.on_step:
                return None
            if self.metric is not None:
                return getattr(self.metric, "_forward_cache", None)
            value = self.step_value
            return self.step_kind(value) if type(value) is float else value
        if not self.on_epoch:
            return None
        if self.computed is None:
            self.computed = self._compute()
        return self.computed

    def _compute(self) -> Any:
        if self.metric is not None:
            value = self.metric.compute()
            if not isinstance(value, Tensor):
                raise ValueError(
                    f"The `.compute()` return of the metric logged as {self.name!r} must be a tensor. Found {value}"
                )
            return value
        total, fabric = self.total, self.fabric if self.sync_dist else None
        if total is None:
            return None
        if self.reduce == "mean":
            if fabric is not None:
                pair = torch.stack([total.to(torch.float64), torch.as_tensor(self.weight, dtype=torch.float64)])
                pair = fabric.all_reduce(pair.to(fabric.device), reduce_op="sum")
                return (pair[0] / pair[1]).to(total.dtype)
            return total / self.weight
        if fabric is not None:
            return fabric.all_reduce(total.clone(), reduce_op=self.reduce)
        return total

    def reset(self) -> None:
        if self.metric is not None and not self.has_reset:
            self.metric.reset()
        self.step_value = None
        self.total = None
        self.weight = 0
        self.computed = None
        self.has_reset = True


class ResultCollection:
    """The values logged during one loop (``"train"``, ``"validate"``, ``"test"``).

    Example:
        ```python
        results = ResultCollection("train", training=True)
        results.batch = batch
        results.log("training_step", "loss", loss, on_step=True, on_epoch=True)
        results.metrics(on_step=True).log  # {"loss_step": tensor(...)}
        ```
    """

    def __init__(self, stage: str, training: bool, module: torch.nn.Module | None = None) -> None:
        self.stage = stage
        self.training = training
        self.module = module
        self.entries: dict[str, _Entry] = {}
        #: True inside steps and batch hooks, False inside epoch-level hooks.
        self.in_step = True
        #: The hook a ``self.log`` call is attributed to when the module does not say.
        self.hook = "training_step" if training else _STEP_OF_STAGE.get(stage, f"{stage}_step")
        #: The evaluation loader running now, when there are several (``None`` otherwise).
        self.dataloader_idx: int | None = None
        #: The batch running now (set and dropped by the logger connector): where a mean's batch size comes from.
        #: Dropped at the batch's end, so that what the epoch-level hooks log counts once, not once per sample.
        self.batch: Any = None
        #: ``batch``'s size, read from it when a mean first needs it.
        self.batch_size: int | None = None
        #: The entry each ``self.log`` call already recorded resolves to, by the call's hook, name, options and
        #: loader: the same call again (every step) skips the checks it passed (see `module_logging.record`).
        self.resolved: dict[tuple[Any, ...], _Entry] = {}

    # -- per step ----------------------------------------------------------------------------------------
    def log(
        self,
        fx: str,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool = False,
        on_epoch: bool = True,
        reduce_fx: Any = "mean",
        sync: Fabric | None = None,
        batch_size: int | None = None,
        add_dataloader_idx: bool = True,
        metric_attribute: str | None = None,
    ) -> _Entry:
        """Record ``value`` (a one-element tensor or a ``Metric``) for ``name`` logged in hook ``fx``; return its entry.

        ``sync`` is the Fabric to reduce ``sync_dist`` values across processes with (``None``: one process).
        """
        if not on_step and not on_epoch:
            raise MisconfigurationException(
                f"`self.log(on_step=False, on_epoch=False)` is not useful: self.log({name!r}) in {fx} would never "
                "be recorded. Set at least one of them to True."
            )
        dataloader_idx = self.dataloader_idx
        key = f"{fx}.{name}"
        if add_dataloader_idx and dataloader_idx is not None:
            key = f"{key}.{dataloader_idx}"
        entry = self.entries.get(key)
        given = (prog_bar, logger, on_step, on_epoch, reduce_fx, sync is not None, add_dataloader_idx, dataloader_idx,
                 metric_attribute)
        if entry is None or entry.given != given:
            options = (
                bool(prog_bar),
                bool(logger),
                bool(on_step),
                bool(on_epoch),
                reduce_name(reduce_fx),
                sync is not None,
                bool(add_dataloader_idx),
                dataloader_idx,
                metric_attribute,
            )
            if entry is None:
                entry = self.entries[key] = _Entry(fx, name, options)
                entry.fabric = sync
            elif entry.options != options:
                raise MisconfigurationException(
                    f"You called `self.log({name}, ...)` twice in `{fx}` with different arguments. This is not "
                    f"allowed: log it with the same arguments each time (now {self._describe(options)}, before "
                    f"{self._describe(entry.options)}), or under another name."
                )
            entry.given = given
        if not isinstance(value, Tensor) and is_metric(value):
            entry.metric = value
            entry.has_reset = False
            entry.computed = None
            return entry
        if entry.metric is not None:
            raise MisconfigurationException(
                f"self.log({name!r}) in {fx} was first given a torchmetrics Metric and now a "
                f"{type(value).__name__}. Log a Metric under one name and plain values under another."
            )
        self.update(entry, value, batch_size)
        return entry

    def update(self, entry: _Entry, value: Tensor, batch_size: int | None) -> None:
        """Add a tensor to an entry of plain values: ``log``'s last part, all a repeated ``self.log`` call needs."""
        if value.dtype not in _FLOAT_DTYPES:
            value = value.to(_float_dtype())
        entry.has_reset = False
        entry.computed = None
        if entry.on_step:
            if entry.sync_dist and entry.fabric is not None:
                # A copy: all_reduce works in place, and the logged tensor may be the user's own.
                entry.step_value = entry.fabric.all_reduce(value.clone(), reduce_op=entry.reduce)
            else:
                entry.step_value = value
        if not entry.on_epoch:
            return
        size = 1
        if entry.reduce == "mean":
            if batch_size is not None:
                size = batch_size
            elif self.batch is not None:
                size = self.batch_size
                if size is None:
                    size = self.batch_size = _batch_size(self.batch)
        entry.accumulate(value, size)

    @staticmethod
    def _describe(options: tuple[Any, ...]) -> str:
        names = ("prog_bar", "logger", "on_step", "on_epoch", "reduce_fx", "sync_dist", "add_dataloader_idx")
        return ", ".join(f"{key}={value!r}" for key, value in zip(names, options, strict=False))

    # -- reading ------------------------------------------------------------------------------------------
    def metrics(self, on_step: bool) -> Metrics:
        """The step values (``on_step``) or the epoch values of the entries logged since the last reset
        (of the current evaluation loader, when several run)."""
        out = Metrics({}, {}, {})
        self.metrics_into(on_step, *out)
        return out

    def metrics_into(
        self, on_step: bool, callback: dict[str, Any], log: dict[str, Any], pbar: dict[str, Any]
    ) -> None:
        """`metrics(on_step)` written into the given dicts (the connector's own, after every batch: no new
        dicts to build and merge)."""
        training = self.training
        dataloader_idx = self.dataloader_idx
        for entry in self.entries.values():
            if entry.has_reset or entry.dataloader_idx != dataloader_idx:
                continue
            if on_step and entry.metric is None:
                # A plain step value: a detached copy, or a CPU float tensor's number (see `StepScalar`).
                value = entry.step_value if entry.on_step else None
                if value is None:
                    continue
                if type(value) is float:
                    value = entry.step_kind(value)
            else:
                value = entry.value(on_step)
                if not isinstance(value, Tensor):
                    continue
                if value.requires_grad:  # a Metric's own result; logged tensors are detached when logged
                    value = value.detach()
            name, forked = entry.read_names[on_step]
            if entry.logger:
                log[forked] = value
            # Evaluation step values are for the loggers only: monitoring one would compare single batches.
            if training or (entry.on_epoch and not on_step):
                callback[name] = value
                if forked is not name:  # the same string unless logged with both levels (`_names`)
                    callback[forked] = value
            if entry.prog_bar:
                pbar[forked] = value

    def names(self) -> set[str]:
        """Every key this collection's entries can appear under (plain, ``_step``, ``_epoch``)."""
        found: set[str] = set()
        for entry in self.entries.values():
            found.update(entry.names(True))
            found.update(entry.names(False))
        return found

    def reset(self, metrics: bool | None = None, fx: str | None = None) -> None:
        """Forget the aggregates (``metrics=True``: only Metric entries, ``False``: only tensors) of ``fx``."""
        for entry in self.entries.values():
            if metrics is not None and metrics != (entry.metric is not None):
                continue
            if fx is None or entry.fx == fx:
                entry.reset()

    # -- checkpoints --------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        entries = {}
        for key, entry in self.entries.items():
            item: dict[str, Any] = {"fx": entry.fx, "name": entry.name, "options": list(entry.options)}
            item["has_reset"] = entry.has_reset
            if entry.metric is not None:
                path = self._metric_path(entry.metric)
                if path is None:
                    continue  # a Metric outside the module cannot be found again after a restart
                item["metric_path"] = path
                item["metric_state"] = {name: _plain(value) for name, value in entry.metric.metric_state.items()}
                item["update_count"] = int(entry.metric._update_count)
            else:
                item["total"] = entry.total
                item["weight"] = entry.weight
                step_value = entry.step_value
                if type(step_value) is float:
                    step_value = entry.step_kind(step_value).tensor()
                item["step_value"] = step_value
            entries[key] = item
        return {"entries": entries}

    def load_state_dict(self, state_dict: dict[str, Any], device: torch.device | None = None) -> None:
        self.entries = {}
        self.resolved = {}
        for key, item in state_dict.get("entries", {}).items():
            if "fx" not in item:
                continue  # written by an older fabricx, whose entries were not per hook
            entry = _Entry(str(item["fx"]), str(item["name"]), tuple(item["options"]))
            entry.has_reset = bool(item.get("has_reset", False))
            if "metric_path" in item:
                entry.metric = self._find_metric(str(item["metric_path"]))
                if entry.metric is None:
                    continue
                _restore_metric(entry.metric, item["metric_state"], int(item.get("update_count", 0)))
            else:
                entry.total = _to(item.get("total"), device)
                entry.weight = item.get("weight", 0)
                entry.step_value = _to(item.get("step_value"), device)
            self.entries[key] = entry

    def _metric_path(self, metric: Any) -> str | None:
        if self.module is None:
            return None
        for path, submodule in self.module.named_modules():
            if submodule is metric:
                return path
        return None

    def _find_metric(self, path: str) -> Any:
        if self.module is None:
            return None
        try:
            return self.module.get_submodule(path) if path else self.module
        except AttributeError:
            return None


def _to(value: Any, device: torch.device | None) -> Any:
    return value.to(device) if isinstance(value, Tensor) and device is not None else value


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


def to_float(value: Any) -> Any:
    """A Python number from a one-element tensor (other values unchanged)."""
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    return float(value) if isinstance(value, StepScalar) else value


__all__ = [
    "STEP_SCALARS",
    "Metrics",
    "ResultCollection",
    "StepScalar",
    "is_metric",
    "reduce_name",
    "tensors_in",
    "to_float",
]
