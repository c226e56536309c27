"""Importing optional packages with an error that names the command to install them."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise ``ModuleNotFoundError`` saying how to install it.

    Example::

        mlflow = require("mlflow", extra="mlflow", feature="MLFlowLogger")
    """
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise ModuleNotFoundError(
            f"{feature} needs the `{module.split('.')[0]}` package, which is not installed. "
            f"Install it with `pip install 'fabricx[{extra}]'`."
        )
    return importlib.import_module(module)


def available(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    return importlib.util.find_spec(module.split(".")[0]) is not None
