"""Importing optional and heavy modules late without touching any random number stream.

Some packages draw from Python's ``random`` (or NumPy's or torch's generator) while they are
imported; ``rich.console`` does. fabricx imports such packages only when they are first used
(inside ``Trainer.fit``, a logger, a strategy), which is after the user seeded their generators,
so every late import goes through `lazy_import()`, which puts the generators back as they were.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Generator
from types import ModuleType
from typing import Any

from fabricx.utilities.rng import capture_rng_states, restore_rng_states


@contextlib.contextmanager
def rng_untouched() -> Generator[None, None, None]:
    """Run the block, then restore Python's, NumPy's and torch's (CPU, and CUDA once initialised)
    random generators to the state they had before it.

    Example:
        ```python
        with rng_untouched():
            import some_module_that_draws_at_import
        ```
    """
    states = capture_rng_states()
    try:
        yield
    finally:
        restore_rng_states(states)


def lazy_import(name: str) -> ModuleType:
    """``importlib.import_module(name)``, leaving every random generator as it was.

    A module imported already is returned straight from ``sys.modules`` (no state is captured).

    Example:
        ```python
        Console = lazy_import("rich.console").Console
        ```
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    with rng_untouched():
        return importlib.import_module(name)


def require(name: str, *, extra: str, feature: str, package: str | None = None) -> ModuleType:
    """`lazy_import()` an optional package, or raise ``ModuleNotFoundError`` naming the install command.

    ``package`` is the name to install it by, when it differs from the module's (``scikit-learn`` for
    ``sklearn``).

    Example:
        ```python
        mlflow = require("mlflow", extra="mlflow", feature="MLFlowLogger")
        ```
    """
    top = name.split(".")[0]
    missing = (
        f"{feature} needs the `{package or top}` package, which is not installed. "
        f'Install it from the package index with `pip install "fabricx[{extra}]"`.'
    )
    if top not in sys.modules and importlib.util.find_spec(top) is None:
        raise ModuleNotFoundError(missing, name=top)
    try:
        return lazy_import(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != top:
            raise  # the package is there; something it needs is not
        raise ModuleNotFoundError(missing, name=top) from error


def submodule(package: str, name: str) -> ModuleType | None:
    """``package.name`` imported (through `lazy_import()`) when it is a module of ``package``, else ``None``.

    A package's ``__getattr__`` uses it so that ``fabricx.strategies.fsdp`` reaches the module without an import
    statement, as attribute access does in a package that imports its modules eagerly.

    Example:
        ```python
        fsdp = submodule("fabricx.strategies", "fsdp")
        ```
    """
    if name.startswith("_"):
        return None
    if importlib.util.find_spec(f"{package}.{name}") is None:
        return None
    return lazy_import(f"{package}.{name}")


def lazy_attributes(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__``: each of ``names`` read from the module it maps to, and any module of
    ``package`` (`submodule()`), both imported on first use.

    Example:
        ```python
        __getattr__ = lazy_attributes(__name__, {"DDPStrategy": "fabricx.strategies.ddp"})
        ```
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(lazy_import(names[name]), name)
        module = submodule(package, name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return module

    return __getattr__
