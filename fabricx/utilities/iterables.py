"""One object or many: the shape of flags such as ``callbacks=``, ``logger=`` and ``plugins=``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def one_or_many(value: Any) -> list[Any]:
    """``value`` as a list: ``None`` is none, any iterable its items, anything else one item.

    Any iterable counts, as in Lightning: a tuple, a generator, or the ``ListConfig`` a Hydra config hands over.
    Strings, mappings and modules are single objects even though they iterate.

    Example:
        ```python
        one_or_many(None)                  # []
        one_or_many(callback)              # [callback]
        one_or_many(cb for cb in (a, b))   # [a, b]
        ```
    """
    if value is None:
        return []
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)) and not _is_module(value):
        return list(value)
    return [value]


def _is_module(value: Any) -> bool:
    # An nn.Sequential iterates over its layers but is one object (torch is imported wherever a module exists).
    import torch

    return isinstance(value, torch.nn.Module)


__all__ = ["one_or_many"]
