"""A collection of loaders as a flat list and its shape: what `CombinedLoader` and the Trainer iterate.

A dict, list or tuple is a node; anything else is a loader. A container whose items are all plain
values (`[0, 1, 2]`, `{3, 4}`) is a loader too, as in Lightning: it is iterated, not split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TreeSpec:
    """The shape of a collection: `kind` is `"leaf"`, `"dict"`, `"list"` or `"tuple"`."""

    kind: str
    keys: tuple[Any, ...] = ()
    children: tuple[TreeSpec, ...] = field(default_factory=tuple)

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(child.num_leaves for child in self.children)


_LEAF = TreeSpec("leaf")


def _is_node(value: Any) -> bool:
    if not isinstance(value, (Mapping, list, tuple)):
        return False
    items = value.values() if isinstance(value, Mapping) else value
    return not all(isinstance(item, (int, float, str)) for item in items)


def flatten(collection: Any) -> tuple[list[Any], TreeSpec]:
    """The loaders of `collection` in order, and its shape.

    Example:
        ```python
        loaders, spec = flatten({"a": loader_a, "b": [loader_b, loader_c]})  # 3 loaders
        ```
    """
    if not _is_node(collection):
        return [collection], _LEAF
    if isinstance(collection, Mapping):
        keys: tuple[Any, ...] = tuple(collection)
        items = list(collection.values())
        kind = "dict"
    else:
        keys, items, kind = (), list(collection), "tuple" if isinstance(collection, tuple) else "list"
    leaves: list[Any] = []
    children = []
    for item in items:
        flat, spec = flatten(item)
        leaves.extend(flat)
        children.append(spec)
    return leaves, TreeSpec(kind, keys, tuple(children))


def unflatten(values: list[Any], spec: TreeSpec) -> Any:
    """`values` (one per loader, in order) in the shape `spec` describes."""
    if len(values) != spec.num_leaves:
        raise ValueError(f"{len(values)} values for a collection of {spec.num_leaves} loaders.")
    position = 0

    def build(node: TreeSpec) -> Any:
        nonlocal position
        if node.kind == "leaf":
            position += 1
            return values[position - 1]
        items = [build(child) for child in node.children]
        if node.kind == "dict":
            return dict(zip(node.keys, items, strict=True))
        return tuple(items) if node.kind == "tuple" else items

    return build(spec)


def is_stateful(obj: Any) -> bool:
    """Whether `obj` has `state_dict()` and `load_state_dict()` (Lightning's `_Stateful`)."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def sized_length(iterable: Any) -> float:
    """`len(iterable)`, or `inf` for one without a length (an iterable dataset, a generator)."""
    try:
        return len(iterable)
    except (TypeError, NotImplementedError):
        return math.inf


__all__ = ["TreeSpec", "flatten", "is_stateful", "sized_length", "unflatten"]
