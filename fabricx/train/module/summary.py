"""A module's layers, parameter counts, modes, FLOPs and (with an `example_input_array`) in/out sizes, as
``lightning.pytorch.utilities.model_summary`` summarizes them; the `ModelSummary` callbacks print it when fit starts.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from fabricx.utilities.rank_zero import rank_zero_warn

PARAMETER_NUM_UNITS = [" ", "K", "M", "B", "T"]
UNKNOWN_SIZE = "?"
LEFTOVER_PARAMS_NAME = "other params"
NOT_APPLICABLE = "n/a"
# Bits per parameter for the estimated size; other precisions (mixed ones) are counted as 32 bits, with a warning.
_PRECISION_BITS = {
    "64": 64,
    "32": 32,
    "16": 16,
    "bf16": 16,
    "16-true": 16,
    "bf16-true": 16,
    "32-true": 32,
    "64-true": 64,
}


class LayerSummary:
    """One layer's type, parameter count and mode, and its input and output sizes once a forward pass has run.

    Example:
        ```python
        layer = LayerSummary(torch.nn.Conv2d(3, 8, 3))
        layer.num_parameters  # 224
        ```
    """

    def __init__(self, module: nn.Module) -> None:
        self._module = module
        self._in_size: str | list | None = None
        self._out_size: str | list | None = None
        self._hook_handle: Any = None
        if not isinstance(module, torch.jit.ScriptModule):  # a scripted module takes no hooks
            self._hook_handle = module.register_forward_hook(self._record_sizes, with_kwargs=True)

    def __del__(self) -> None:
        self.detach_hook()

    def _record_sizes(self, _: nn.Module, args: Any, kwargs: Any, out: Any) -> None:
        # Once: a module called again (a recurrent one) keeps the sizes of its first call.
        inputs = (*args, *kwargs.values()) if kwargs else args
        self._in_size = parse_batch_shape(inputs[0] if len(inputs) == 1 else inputs)
        self._out_size = parse_batch_shape(out)
        self.detach_hook()

    def detach_hook(self) -> None:
        """Remove the size-recording hook if no forward pass has removed it yet."""
        if self._hook_handle is not None:
            self._hook_handle.remove()
            self._hook_handle = None

    @property
    def in_size(self) -> str | list:
        return self._in_size or UNKNOWN_SIZE

    @property
    def out_size(self) -> str | list:
        return self._out_size or UNKNOWN_SIZE

    @property
    def layer_type(self) -> str:
        """The class name of the module."""
        return type(self._module).__name__

    @property
    def num_parameters(self) -> int:
        return sum(_numel(p) or 0 for p in self._module.parameters())

    @property
    def training(self) -> bool:
        return self._module.training


class ModelSummary:
    """The summary of a module's layers down to ``max_depth`` (``-1``: all, ``0``: none) and its totals;
    ``str(summary)`` is Lightning's table. A module with an `example_input_array` is run on it once (in eval mode,
    without gradients) for the layers' in/out sizes and FLOPs.

    Example:
        ```python
        summary = ModelSummary(model, max_depth=2)
        summary.total_parameters, summary.trainable_parameters, summary.model_size
        print(summary)
        ```
    """

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"`max_depth` can be -1, 0 or > 0, got {max_depth}.")
        from torch.utils.flop_counter import FlopCounterMode

        self._model = model
        self._max_depth = max_depth
        self._warned_uninitialized = False
        # depth + 1: the root module is depth 0 for the counter
        self._flop_counter = FlopCounterMode(display=False, depth=max_depth + 1)
        self._layer_summary = self.summarize()
        trainer = _trainer_of(model)
        precision = str(trainer.precision) if trainer is not None else "32-true"
        if trainer is not None and precision not in _PRECISION_BITS:
            rank_zero_warn(
                f"Precision {precision} is not supported by the model summary.  Estimated model size in MB will not"
                " be accurate. Using 32 bits instead.",
                category=UserWarning,
            )
        self._precision_megabytes = (_PRECISION_BITS.get(precision, 32) / 8.0) * 1e-6

    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        if self._max_depth == 0:
            return []
        if self._max_depth == 1:
            return list(self._model.named_children())
        return list(self._model.named_modules())[1:]  # not the root module

    @property
    def layer_names(self) -> list[str]:
        return list(self._layer_summary)

    @property
    def layer_types(self) -> list[str]:
        return [layer.layer_type for layer in self._layer_summary.values()]

    @property
    def in_sizes(self) -> list:
        return [layer.in_size for layer in self._layer_summary.values()]

    @property
    def out_sizes(self) -> list:
        return [layer.out_size for layer in self._layer_summary.values()]

    @property
    def param_nums(self) -> list[int]:
        return [layer.num_parameters for layer in self._layer_summary.values()]

    @property
    def training_modes(self) -> list[bool]:
        return [layer.training for layer in self._layer_summary.values()]

    @property
    def total_training_modes(self) -> dict[str, int]:
        modes = [module.training for module in self._model.modules()][1:]  # not the root module
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_parameters(self) -> int:
        return self._count(self._model.parameters())

    @property
    def trainable_parameters(self) -> int:
        return self._count(p for p in self._model.parameters() if p.requires_grad)

    def _count(self, parameters: Any) -> int:
        sizes = [_numel(p) for p in parameters]
        if None in sizes and not self._warned_uninitialized:  # once per summary (it reads the totals often)
            self._warned_uninitialized = True
            rank_zero_warn(
                "The total number of parameters detected may be inaccurate because the model contains an instance of"
                " `UninitializedParameter`. To get an accurate number, set `self.example_input_array` in your"
                " LightningModule."
            )
        return sum(size or 0 for size in sizes)

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        """The parameters' estimated size in MB at the run's precision."""
        return self.total_parameters * self._precision_megabytes

    @property
    def total_flops(self) -> int:
        return self._flop_counter.get_total_flops()

    @property
    def flop_counts(self) -> dict[str, dict[Any, int]]:
        counts = self._flop_counter.get_flop_counts()
        return {name: counts.get(f"{type(self._model).__name__}.{name}", {}) for name in self.layer_names}

    def summarize(self) -> dict[str, LayerSummary]:
        summary = OrderedDict((name, LayerSummary(module)) for name, module in self.named_modules)
        if getattr(self._model, "example_input_array", None) is not None:
            self._forward_example_input()
        for layer in summary.values():
            layer.detach_hook()
        if self._max_depth >= 1:
            for name in [name for name in summary if name.count(".") >= self._max_depth]:
                del summary[name]
        return summary

    def _forward_example_input(self) -> None:
        from fabricx.train.module.module_export import example_on_device

        model = self._model
        example = model.example_input_array
        trainer = _trainer_of(model)
        if hasattr(model, "transfer_batch_to_device"):
            example = example_on_device(model, example)  # type: ignore[arg-type]
        modes = {module: module.training for module in model.modules()}
        model.eval()
        forward_context = trainer.fabric.autocast() if trainer is not None else contextlib.nullcontext()
        try:
            with torch.no_grad(), forward_context, self._flop_counter:
                if isinstance(example, (list, tuple)):
                    model(*example)
                elif isinstance(example, dict):
                    model(**example)
                else:
                    model(example)
        finally:
            for module, training in modes.items():
                module.training = training

    def _get_summary_data(self) -> list[tuple[str, list[str]]]:
        """The table's columns: (header, cells)."""
        columns = [
            (" ", [str(index) for index in range(len(self._layer_summary))]),
            ("Name", self.layer_names),
            ("Type", self.layer_types),
            ("Params", [get_human_readable_count(n) for n in self.param_nums]),
            ("Mode", ["train" if mode else "eval" for mode in self.training_modes]),
            ("FLOPs", [get_human_readable_count(sum(c.values())) for c in self.flop_counts.values()]),
        ]
        if getattr(self._model, "example_input_array", None) is not None:
            columns.append(("In sizes", [str(size) for size in self.in_sizes]))
            columns.append(("Out sizes", [str(size) for size in self.out_sizes]))
        leftover = self.total_parameters - self.total_layer_params
        if leftover > 0:  # parameters of the root module itself, in no layer
            cells = {
                " ": " ",
                "Name": LEFTOVER_PARAMS_NAME,
                "Params": get_human_readable_count(leftover),
            }
            for header, column in columns:
                column.append(cells.get(header, NOT_APPLICABLE))
        return columns

    def __str__(self) -> str:
        return format_summary_table(
            self.total_parameters,
            self.trainable_parameters,
            self.model_size,
            self.total_training_modes,
            self.total_flops,
            *self._get_summary_data(),
        )

    def __repr__(self) -> str:
        return str(self)


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """The `ModelSummary` of a module.

    Example:
        ```python
        print(summarize(model, max_depth=-1))
        ```
    """
    return ModelSummary(lightning_module, max_depth=max_depth)


def parse_batch_shape(batch: Any) -> str | list:
    """A tensor's shape as a list (nested for lists and tuples of tensors), ``"?"`` for anything else."""
    if hasattr(batch, "shape"):
        return list(batch.shape)
    if isinstance(batch, (list, tuple)):
        return [parse_batch_shape(item) for item in batch]
    return UNKNOWN_SIZE


def format_summary_table(
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
    total_flops: int,
    *cols: tuple[str, list[str]],
) -> str:
    """Lightning's text table: the columns side by side, then the totals.

    Example:
        ```python
        format_summary_table(10, 10, 0.0, {"train": 1, "eval": 0}, 0, ("Name", ["net"]))
        ```
    """
    rows = len(cols[0][1])
    widths = [max([len(header), *(len(str(cell)) for cell in cells)]) for header, cells in cols]
    total_width = sum(widths) + 3 * (1 + len(cols))
    lines = [" | ".join(f"{header:<{width}}" for (header, _), width in zip(cols, widths, strict=True))]
    lines.append("-" * total_width)
    for row in range(rows):
        lines.append(" | ".join(f"{cells[row]!s:<{width}}" for (_, cells), width in zip(cols, widths, strict=True)))
    lines.append("-" * total_width)
    totals = [
        (get_human_readable_count(trainable_parameters), "Trainable params"),
        (get_human_readable_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (get_human_readable_count(total_parameters), "Total params"),
        (get_formatted_model_size(model_size), "Total estimated model params size (MB)"),
        (total_training_modes["train"], "Modules in train mode"),
        (total_training_modes["eval"], "Modules in eval mode"),
        (get_human_readable_count(total_flops), "Total Flops"),
    ]
    lines.extend(f"{value!s:<10}{label}" for value, label in totals)
    return "\n".join(lines)


def get_formatted_model_size(total_model_size: float) -> str:
    return f"{total_model_size:,.3f}"


def get_human_readable_count(number: int) -> str:
    """``number`` abbreviated with K, M, B, T (thousands to trillions).

    Example:
        ```python
        get_human_readable_count(1234)  # "1.2 K"
        get_human_readable_count(123)  # "123  "
        ```
    """
    if number < 0:
        raise ValueError(f"get_human_readable_count takes a count (>= 0), got {number}.")
    digits = int(math.floor(math.log10(number)) + 1 if number > 0 else 1)
    groups = min(math.ceil(digits / 3), len(PARAMETER_NUM_UNITS))  # nothing beyond trillions
    scaled = number * 10 ** (-3 * (groups - 1))
    unit = PARAMETER_NUM_UNITS[groups - 1]
    if groups == 1 or scaled >= 100:
        return f"{int(scaled):,d} {unit}"
    return f"{scaled:,.1f} {unit}"


def _numel(parameter: torch.Tensor) -> int | None:
    """A parameter's size (DeepSpeed ZeRO-3's full size where it is partitioned); ``None`` for one not yet
    initialized (a lazy layer before its first forward)."""
    from torch.nn.parameter import UninitializedParameter

    if isinstance(parameter, UninitializedParameter) and not _is_dtensor(parameter):
        return None
    return int(getattr(parameter, "ds_numel", parameter.numel()))


def _is_dtensor(tensor: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a build without distributed
        return False
    return isinstance(tensor, DTensor)


def _trainer_of(model: nn.Module) -> Any:
    """The Trainer running ``model`` (a `TrainModule` in a run), else ``None``."""
    return model.__dict__.get("_trainer")


__all__ = [
    "LayerSummary",
    "ModelSummary",
    "format_summary_table",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]
