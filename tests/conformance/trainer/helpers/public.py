"""Bind a public name the ported tests import, whether or not fabricx exports it yet.

A test file imports many names; one that fabricx lacks would make the whole file fail to import. ``public``
returns fabricx's object when it exists and otherwise a stand-in class that raises ``NotImplementedError``
naming the missing name when it is used (called, subclassed and instantiated, or its attributes read as
values), so only the tests that use it fail.
"""

from __future__ import annotations

import importlib
from typing import Any


class _Absent(type):
    def __getattr__(cls, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _absent(f"{cls.__qualname__}.{attribute}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"fabricx has no public {cls.__qualname__}")

    def __iter__(cls):
        raise NotImplementedError(f"fabricx has no public {cls.__qualname__}")


def _absent(qualified: str) -> Any:
    return _Absent(qualified.rsplit(".", 1)[-1], (), {"__qualname__": qualified})


def public(module: str, name: str) -> Any:
    """`public("fabricx.callbacks", "Timer")`: fabricx's `Timer`, or a stand-in that fails when used."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return _absent(f"{module}.{name}")
