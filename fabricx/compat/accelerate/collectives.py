"""Collectives for the Accelerate adapter: gather (and gather without the repeated samples), reduce,
padding across processes, splitting inputs between processes."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

from fabricx.compat.accelerate.splitting import split_for_process

if TYPE_CHECKING:
    from fabricx.compat.accelerate.data import GradientState
    from fabricx.fabric import Fabric

__all__ = ["CollectivesMixin", "split_for_process"]


class CollectivesMixin:
    """``Accelerator`` methods that exchange data between processes."""

    _fabric: Fabric
    gradient_state: GradientState
    num_processes: int
    process_index: int

    def gather(self, tensor: Any) -> Any:
        """Concatenate tensors (or nested collections of them) from every process along the first dimension.

        Example:
            ```python
            all_predictions = accelerator.gather(predictions)
            ```
        """
        if self.num_processes == 1:
            return tensor
        return apply_to_collection(tensor, Tensor, self._gather_one)

    def _gather_one(self, tensor: Tensor) -> Tensor:
        if tensor.dim() == 0:
            tensor = tensor[None]
        gathered = self._fabric.all_gather(tensor)
        if isinstance(gathered, list):
            return torch.cat(gathered)
        return gathered.reshape(-1, *tensor.shape[1:])

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather like `gather()`, then, on the last batch of the prepared loader being read, drop
        the samples that were repeated to even out the last round, so metrics see every sample once.

        Example:
            ```python
            pairs = (predictions, batch["labels"])
            predictions, references = accelerator.gather_for_metrics(pairs)
            ```
        """
        use_gather_object = use_gather_object or not _only_tensors(input_data)
        data = self._gather_object(input_data) if use_gather_object else self.gather(input_data)
        state = self.gradient_state
        if not state.end_of_dataloader or state.remainder <= 0:
            return data
        keep = state.remainder
        if use_gather_object:
            return data[:keep]
        return apply_to_collection(data, Tensor, lambda t: t[:keep])

    def _gather_object(self, obj: Any) -> list[Any]:
        from fabricx.compat.accelerate.ops import gather_object

        return gather_object(list(obj) if isinstance(obj, list | tuple) else [obj])

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Combine tensors over every process: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``;
        ``"none"`` returns them unchanged.

        Example:
            ```python
            total = accelerator.reduce(correct, reduction="sum")
            ```
        """
        from fabricx.compat.accelerate.ops import reduce

        return reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        """Pad tensors along ``dim`` to the largest size any process has, so they can be gathered.

        Example:
            ```python
            padded = accelerator.pad_across_processes(tokens, dim=1, pad_index=0)
            tokens = accelerator.gather(padded)
            ```
        """
        from fabricx.compat.accelerate.ops import pad_across_processes

        return pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Generator[Any, None, None]:
        """Give each process its contiguous part of a list, tuple, tensor or dict of them.

        Example:
            ```python
            with accelerator.split_between_processes(["a", "b", "c"]) as mine: ...
            ```
        """
        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)


def _only_tensors(data: Any) -> bool:
    if isinstance(data, Tensor):
        return True
    if isinstance(data, dict):
        return bool(data) and all(_only_tensors(v) for v in data.values())
    if isinstance(data, list | tuple):
        return bool(data) and all(_only_tensors(v) for v in data)
    return False
