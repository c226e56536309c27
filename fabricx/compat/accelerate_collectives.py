"""Collectives for the Accelerate adapter: gather (and gather without the repeated samples), reduce,
padding across processes, splitting inputs between processes."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

from fabricx.compat.accelerate_data import padded_positions_mask

if TYPE_CHECKING:
    from fabricx.compat.accelerate_data import _ActiveLoaders
    from fabricx.fabric import Fabric

__all__ = ["CollectivesMixin"]


class CollectivesMixin:
    """``Accelerator`` methods that exchange data between processes."""

    _fabric: Fabric
    _active_loaders: _ActiveLoaders
    num_processes: int
    process_index: int

    def gather(self, tensor: Any) -> Any:
        """Concatenate tensors (or nested collections of them) from every process along the first dimension.

        Example::

            all_predictions = accelerator.gather(predictions)
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
        """Gather like :meth:`gather`, then drop the samples the distributed sampler repeated to even out
        the last batches, so metrics see every sample exactly once.

        Example::

            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
        """
        if self.num_processes == 1:
            return input_data
        if use_gather_object or not _holds_tensor(input_data):
            return self._drop_repeats_list(self._gather_object(input_data))
        gathered = self.gather(input_data)
        layout = self._current_layout()
        if layout is None:
            return gathered
        dataset_length, replicas, first, length = layout
        if replicas != self.num_processes:
            return gathered
        mask = padded_positions_mask(dataset_length, replicas, first, length)
        if all(mask):
            return gathered
        keep = torch.tensor(mask)

        def drop(tensor: Tensor) -> Tensor:
            if tensor.dim() == 0 or tensor.shape[0] != len(mask):
                return tensor
            return tensor[keep.to(tensor.device)]

        return apply_to_collection(gathered, Tensor, drop)

    def _current_layout(self) -> tuple[int, int, int, int] | None:
        loader = self._active_loaders.current()
        return None if loader is None else loader.current_batch_layout()

    def _gather_object(self, obj: Any) -> list[Any]:
        items = list(obj) if isinstance(obj, list | tuple) else [obj]
        if self.num_processes == 1:
            return items
        gathered: list[Any] = [None] * self.num_processes
        torch.distributed.all_gather_object(gathered, items)
        return [item for part in gathered for item in part]

    def _drop_repeats_list(self, gathered: list[Any]) -> list[Any]:
        layout = self._current_layout() if self.num_processes > 1 else None
        if layout is None:
            return gathered
        mask = padded_positions_mask(*layout)
        if len(mask) != len(gathered):
            return gathered
        return [item for item, keep in zip(gathered, mask, strict=True) if keep]

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Sum (``"sum"``) or average (``"mean"``) tensors over every process; ``"none"`` returns them.

        Example::

            total = accelerator.reduce(correct, reduction="sum")
        """
        if reduction not in ("sum", "mean", "none"):
            raise ValueError(f"reduction={reduction!r}; allowed are 'sum', 'mean', 'none'.")
        if reduction == "none" or self.num_processes == 1:
            return apply_to_collection(tensor, Tensor, lambda t: t * scale if scale != 1.0 else t)
        reduced = self._fabric.all_reduce(tensor, reduce_op=reduction)
        return apply_to_collection(reduced, Tensor, lambda t: t * scale if scale != 1.0 else t)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        """Pad tensors along ``dim`` to the largest size any process has, so they can be gathered.

        Example::

            tokens = accelerator.gather(accelerator.pad_across_processes(tokens, dim=1, pad_index=0))
        """

        def pad(t: Tensor) -> Tensor:
            if self.num_processes == 1 or t.dim() == 0:
                return t
            sizes = self._fabric.all_gather(torch.tensor([t.shape[dim]], device=t.device))
            largest = int(torch.as_tensor(sizes).max())
            if largest == t.shape[dim]:
                return t
            shape = list(t.shape)
            shape[dim] = largest
            out = t.new_full(shape, pad_index)
            start = largest - t.shape[dim] if pad_first else 0
            out.narrow(dim, start, t.shape[dim]).copy_(t)
            return out

        return apply_to_collection(tensor, Tensor, pad)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Generator[Any, None, None]:
        """Give each process its contiguous part of a list, tuple, tensor or dict of them.

        Example::

            with accelerator.split_between_processes(["a", "b", "c"]) as mine: ...
        """
        yield _split(inputs, self.num_processes, self.process_index, apply_padding)


def _holds_tensor(data: Any) -> bool:
    found = []
    apply_to_collection(data, Tensor, lambda t: found.append(True))
    return bool(found)


def _split(inputs: Any, parts: int, index: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        return {key: _split(value, parts, index, apply_padding) for key, value in inputs.items()}
    length = len(inputs)
    per_part, extra = divmod(length, parts)
    start = index * per_part + min(index, extra)
    end = start + per_part + (1 if index < extra else 0)
    chunk = inputs[start:end]
    if apply_padding and extra and index >= extra and length:
        last = inputs[-1:]
        chunk = torch.cat([chunk, last]) if isinstance(chunk, Tensor) else chunk + type(chunk)(last)
    return chunk
