"""Views of one tensor storage: which of them are the same view, and the bytes a group of them covers.

The code-free serializer (`fabricx.checkpoint.serialization`) and the background save's host copy
(`fabricx.checkpoint.background`) both keep such a group as one copy of the bytes it covers, each view
rebuilt on that copy, so memory shared before the save is shared after it.

Example:

```python
base = torch.arange(6.0)
span = byte_span([base[1:3], base[2:5]])
span.data.numel(), span.offsets  # (16, [0, 1]): four floats, views at 0 and 1
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["ByteSpan", "byte_span", "view_key"]


def view_key(tensor: torch.Tensor) -> tuple:
    """What two views of one storage share when they are the same view: dtype, shape, strides and offset."""
    return (tensor.dtype, tuple(tensor.shape), tensor.stride(), tensor.storage_offset())


def _extent(tensor: torch.Tensor) -> int:
    """How many elements from the view's first one to one past its last one."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True))


@dataclass(frozen=True)
class ByteSpan:
    """The bytes some views of one storage cover, as a uint8 view on their device (``data``), and where each
    view starts in it, counted in its own elements (``offsets``)."""

    data: torch.Tensor
    offsets: list[int]


def byte_span(views: Sequence[torch.Tensor]) -> ByteSpan:
    """The `ByteSpan` of ``views`` (all of one storage), starting at a multiple of their largest element size."""
    sizes = [view.element_size() for view in views]
    align = max(sizes)
    starts = [int(view.storage_offset()) * size for view, size in zip(views, sizes, strict=True)]
    ends = [start + _extent(view) * size for view, start, size in zip(views, starts, sizes, strict=True)]
    begin = (min(starts) // align) * align
    end = max(max(ends), begin)
    storage = views[0].untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8, device=views[0].device)
    raw.set_(storage, 0, (storage.nbytes(),), (1,))
    return ByteSpan(raw[begin:end], [(start - begin) // size for start, size in zip(starts, sizes, strict=True)])
