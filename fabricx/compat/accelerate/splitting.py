"""Splitting inputs between processes: the pure arithmetic behind `split_between_processes`, in a module
that imports nothing of the adapter (the process state and the collectives both use it)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["split_for_process"]


def split_for_process(inputs: Any, parts: int, index: int, apply_padding: bool = False) -> Any:
    """Process ``index``'s contiguous part (of ``parts``) of a list, tuple, tensor, dataset or dict of them.

    Example:
        ```python
        split_for_process([1, 2, 3], parts=2, index=1)  # [3]
        ```
    """
    if isinstance(inputs, dict):
        return {key: split_for_process(value, parts, index, apply_padding) for key, value in inputs.items()}
    length = len(inputs)
    per_part, extra = divmod(length, parts)
    start = index * per_part + min(index, extra)
    end = start + per_part + (1 if index < extra else 0)
    if hasattr(inputs, "select") and not isinstance(inputs, Tensor | list | tuple):
        return inputs.select(range(start, end))  # a datasets.Dataset
    chunk: Any = inputs[start:end]
    if apply_padding and extra and index >= extra and length:
        last: Any = inputs[-1:]
        chunk = torch.cat([chunk, last]) if isinstance(chunk, Tensor) else chunk + type(chunk)(last)
    return chunk
