"""``RichModelSummary``: a table of a module's layers and parameter counts, printed when fit starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import nn

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.imports import lazy_import

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


@dataclass
class LayerSummary:
    name: str
    type: str
    params: int
    trainable: int
    mode: str


@dataclass
class ModelSummary:
    """Layers down to ``max_depth`` and the totals of the whole module."""

    layers: list[LayerSummary]
    trainable_params: int
    frozen_params: int
    total_params: int
    size_bytes: int

    @property
    def size_mb(self) -> float:
        return self.size_bytes / 1e6


def summarize(module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """Count parameters per layer (down to ``max_depth`` levels) and for the whole module.

    Shared parameters are counted once; the size covers parameters and buffers.

    Example:
        ```python
        summary = summarize(model, max_depth=2)
        summary.total_params, summary.size_mb
        ```
    """
    layers = []
    if max_depth > 0:
        for name, submodule in module.named_modules():
            if not name or name.count(".") >= max_depth:
                continue
            params = list(_unique(submodule.parameters()))
            layers.append(
                LayerSummary(
                    name=name,
                    type=type(submodule).__name__,
                    params=sum(p.numel() for p in params),
                    trainable=sum(p.numel() for p in params if p.requires_grad),
                    mode="train" if submodule.training else "eval",
                )
            )
    params = list(_unique(module.parameters()))
    trainable = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    size = sum(p.numel() * p.element_size() for p in params)
    size += sum(b.numel() * b.element_size() for b in _unique(module.buffers()))
    return ModelSummary(layers, trainable, total - trainable, total, size)


def _unique(tensors: Any) -> Any:
    seen: set[int] = set()
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield tensor


def _count(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return str(n)


class RichModelSummary(Callback):
    """Print a table of the module's layers (name, type, parameters, trainable, mode) and totals
    (trainable, frozen, total parameters and estimated size) on global rank zero when ``fit`` starts.

    Example:
        ```python
        Trainer(callbacks=[RichModelSummary(max_depth=2)])
        ```
    """

    def __init__(self, max_depth: int = 1, console_kwargs: dict[str, Any] | None = None) -> None:
        self.max_depth = max_depth
        self.console_kwargs = console_kwargs or {}

    def on_fit_start(self, trainer: Trainer, module: TrainModule) -> None:
        if not trainer.is_global_zero:
            return
        self.render(summarize(module, self.max_depth))

    def render(self, summary: ModelSummary) -> None:
        """Print ``summary`` as a rich table."""
        Console = lazy_import("rich.console").Console
        Table = lazy_import("rich.table").Table

        table = Table(header_style="bold")
        for column, justify in (
            ("", "right"),
            ("Name", "left"),
            ("Type", "left"),
            ("Params", "right"),
            ("Trainable", "right"),
            ("Mode", "left"),
        ):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for index, layer in enumerate(summary.layers):
            table.add_row(str(index), layer.name, layer.type, _count(layer.params), _count(layer.trainable), layer.mode)
        console = Console(**self.console_kwargs)
        console.print(table)
        console.print(
            f"Trainable params: {_count(summary.trainable_params)}\n"
            f"Frozen params: {_count(summary.frozen_params)}\n"
            f"Total params: {_count(summary.total_params)}\n"
            f"Estimated size: {summary.size_mb:.3f} MB",
            highlight=False,
        )
