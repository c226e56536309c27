"""Accelerate's collective functions (``accelerate.utils.gather`` and friends) over torch.distributed.

With ``PartialState().debug = True`` (or ``ACCELERATE_DEBUG_MODE=1``) every call first checks that all
processes passed tensors of the same shape and raises `DistributedOperationException` if not.

Example:
    ```python
    from fabricx.compat.accelerate.ops import gather
    everything = gather(torch.tensor([rank]))
    ```
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

__all__ = [
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "copy_tensor_to_devices",
    "gather",
    "gather_object",
    "pad_across_processes",
    "reduce",
    "send_to_device",
    "synchronize_rng_states",
]


class DistributedOperationException(Exception):
    """The processes called a collective with tensors of different shapes (found in debug mode)."""


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _debug() -> bool:
    from fabricx.compat.accelerate.process import PartialState

    return bool(PartialState._shared.get("debug", False))


def _shapes(data: Any) -> list[list[int]]:
    found: list[list[int]] = []
    apply_to_collection(data, Tensor, lambda t: found.append(list(t.shape)))
    return found


def _check_same_shapes(name: str, data: Any) -> None:
    if not (_debug() and _distributed()):
        return
    mine = _shapes(data)
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    if any(shapes != every[0] for shapes in every):
        listing = "\n  - ".join(f"Process {rank}: {shapes}" for rank, shapes in enumerate(every))
        raise DistributedOperationException(
            f"Cannot apply the desired operation due to shape mismatches. All shapes across devices must be valid."
            f"\n\nOperation: `{name}`\nInput shapes:\n  - {listing}"
        )


def send_to_device(data: Any, device: torch.device | str, non_blocking: bool = False, skip_keys: Any = None) -> Any:
    """Move every tensor in ``data`` to ``device``."""
    return apply_to_collection(data, Tensor, lambda t: t.to(device, non_blocking=non_blocking))


def gather(tensor: Any) -> Any:
    """Concatenate tensors (or collections of them) from every process along the first dimension."""
    _check_same_shapes("accelerate.utils.operations.gather", tensor)
    if not _distributed():
        return tensor

    def one(t: Tensor) -> Tensor:
        if t.dim() == 0:
            t = t[None]
        t = t.contiguous()
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return torch.cat(parts)

    return apply_to_collection(tensor, Tensor, one)


def gather_object(obj: Any) -> list[Any]:
    """Every process's list (or object) joined into one list, in process order."""
    if not _distributed():
        return obj
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, obj)
    return [item for part in every for item in (part if isinstance(part, list | tuple) else [part])]


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Every process gets ``from_process``'s tensors (same shapes needed)."""
    _check_same_shapes("accelerate.utils.operations.broadcast", tensor)
    if not _distributed():
        return tensor

    def one(t: Tensor) -> Tensor:
        out = t.contiguous().clone()
        dist.broadcast(out, src=from_process)
        return out

    return apply_to_collection(tensor, Tensor, one)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replace ``object_list``'s items with ``from_process``'s, in place; returns it."""
    if _distributed():
        dist.broadcast_object_list(object_list, src=from_process)
    return object_list


def copy_tensor_to_devices(tensor: Tensor | None = None) -> Tensor:
    """The main process's tensor, on every process (the others pass ``None``)."""
    if not _distributed():
        assert tensor is not None
        return tensor
    holder = [tensor.cpu() if tensor is not None else None]
    dist.broadcast_object_list(holder, src=0)
    from fabricx.compat.accelerate.process import PartialState

    received = holder[0]
    assert received is not None, "rank 0 broadcast a tensor"
    return received.to(PartialState().device)


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad tensors along ``dim`` to the largest size any process has, so they can be gathered."""
    if _debug() and _distributed():
        ranks = [len(s) for s in _shapes(tensor)]
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, ranks)
        if any(r != every[0] for r in every):
            raise DistributedOperationException(
                "Cannot apply the desired operation due to shape mismatches. All shapes across devices must be "
                f"valid.\n\nOperation: `accelerate.utils.operations.pad_across_processes`\nInput dims: {every}"
            )

    def one(t: Tensor) -> Tensor:
        if not _distributed() or dim >= t.dim():
            return t
        size = torch.tensor([t.shape[dim]], device=t.device)
        sizes = [torch.empty_like(size) for _ in range(dist.get_world_size())]
        dist.all_gather(sizes, size)
        largest = int(torch.cat(sizes).max())
        if largest == t.shape[dim]:
            return t
        shape = list(t.shape)
        shape[dim] = largest
        out = t.new_full(shape, pad_index)
        start = largest - t.shape[dim] if pad_first else 0
        out.narrow(dim, start, t.shape[dim]).copy_(t)
        return out

    return apply_to_collection(tensor, Tensor, one)


_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def reduce(tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
    """Combine tensors over every process: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` (``"none"``: unchanged).

    Example:
        ```python
        largest = reduce(torch.tensor([loss]), "max")
        ```
    """
    if reduction not in (*_OPS, "none"):
        raise ValueError(f"reduction={reduction!r}; allowed are 'sum', 'mean', 'max', 'min', 'none'.")
    _check_same_shapes("accelerate.utils.operations.reduce", tensor)

    def one(t: Tensor) -> Tensor:
        out = t.clone()
        if reduction != "none" and _distributed():
            dist.all_reduce(out, op=_OPS[reduction])
            if reduction == "mean":
                out = out / dist.get_world_size()
        return out * scale if scale != 1.0 else out

    return apply_to_collection(tensor, Tensor, one)


def synchronize_rng_states(rng_types: list[str], generator: torch.Generator | None = None) -> None:
    """Give every process the main process's random state for each of ``rng_types``
    (``"torch"``, ``"cuda"``, ``"generator"``, ``"python"``, ``"numpy"``)."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator)


def synchronize_rng_state(rng_type: str, generator: torch.Generator | None = None) -> None:
    """One of `synchronize_rng_states()`'s kinds."""
    if not _distributed():
        return
    kind = str(getattr(rng_type, "value", rng_type)).lower()
    if kind == "torch":
        state = torch.get_rng_state()
        dist.broadcast(state, src=0)
        torch.set_rng_state(state)
    elif kind == "cuda" and torch.cuda.is_available():
        holder = [torch.cuda.get_rng_state().cpu()]
        dist.broadcast_object_list(holder, src=0)
        torch.cuda.set_rng_state(holder[0])
    elif kind == "generator" and generator is not None:
        state = generator.get_state()
        dist.broadcast(state, src=0)
        generator.set_state(state)
    elif kind in ("python", "numpy"):
        holder: list[Any] = [random.getstate() if kind == "python" else np.random.get_state()]
        dist.broadcast_object_list(holder, src=0)
        if kind == "python":
            random.setstate(holder[0])
        else:
            np.random.set_state(holder[0])
