"""Hand a model the tensors a load read fresh from disk, instead of copying them into its parameters.

A checkpoint directory's tensors are read into memory of their own (`fabricx.checkpoint.safetensors_read`) and
checked before anything is restored. Copying them into the parameters afterwards would move every byte a second
time; instead each parameter (and buffer) takes the fresh tensor as its data, as ``module.to()`` gives a parameter
new data: the `nn.Parameter` object stays the same, so an optimizer, DDP and hooks that hold it keep working
(``load_state_dict(assign=True)`` would put new `nn.Parameter` objects in their place and leave an optimizer
stepping the old ones). A tensor is handed over only where that is the same as copying it: same dtype, shape and
device, each side owning exactly its own memory (no view into a larger buffer, no weight tied to another, no
tensor a second entry shares), and modules that load their state without pre-hooks or their own
``_load_from_state_dict``; everything else is copied as before. Then the module's own ``load_state_dict`` runs
over the whole state as always (a handed-over tensor is already there, so torch skips its copy).

Example:

```python
hand_over(model, read_checkpoint("ckpt").shared["model"], strict=True)
model.load_state_dict(state, strict=True)  # copies only what was not handed over
```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from fabricx._compat.torch_internals import loads_state_plainly

__all__ = ["hand_over"]


def hand_over(module: Module, state: Mapping[str, Any], strict: bool) -> int:
    """Give ``module``'s parameters and buffers the tensors of ``state`` that they can take without a copy (see the
    module docstring); returns how many were handed over. Call it only with tensors that belong to this load alone.

    Example:
        ```python
        hand_over(model, {"weight": torch.ones(2, 2), "bias": torch.zeros(2)}, strict=True)  # 2 for a Linear(2, 2)
        ```
    """
    live = module.state_dict(keep_vars=True)
    if strict and set(live) != {key for key in state if isinstance(key, str)}:
        return 0  # torch refuses the load, after copying what matches: keep its behaviour
    if not all(loads_state_plainly(sub) for sub in module.modules()):
        return 0
    if not all(_plain(value) for value in (*live.values(), *state.values()) if isinstance(value, Tensor)):
        return 0  # a tensor subclass (FSDP2's DTensor, a quantized or wrapped tensor) owns memory in its own way
    pairs = [(live[key], value) for key, value in state.items() if key in live and _same_kind(live[key], value)]
    live_memory = _owners(live.values())
    saved_memory = _owners(state.values())
    handed = 0
    with torch.no_grad():
        for tensor, value in pairs:
            if live_memory[_memory(tensor)] == 1 and saved_memory[_memory(value)] == 1:
                tensor.data = value
                handed += 1
    return handed


def _plain(tensor: Tensor) -> bool:
    return type(tensor) in (Tensor, Parameter)


def _same_kind(tensor: Any, value: Any) -> bool:
    return (
        _plain(tensor)
        and type(value) is Tensor
        and not value.requires_grad
        and tensor.dtype == value.dtype
        and tensor.shape == value.shape
        and tensor.device == value.device
        and tensor.numel() > 0
        and _owns_its_memory(tensor)
        and _owns_its_memory(value)
    )


def _owns_its_memory(tensor: Tensor) -> bool:
    storage = tensor.untyped_storage()
    return (
        tensor.layout == torch.strided
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and storage.nbytes() == tensor.numel() * tensor.element_size()
        and storage.filename is None  # never a memory-mapped file: the parameter would change with the file
    )


def _memory(tensor: Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _owners(values: Any) -> dict[int, int]:
    """How many of ``values`` (tensors among other things) live in each piece of memory."""
    counts: dict[int, int] = {}
    for value in values:
        if isinstance(value, Tensor) and value.device.type != "meta":
            counts[_memory(value)] = counts.get(_memory(value), 0) + 1
    return counts
