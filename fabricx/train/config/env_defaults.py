"""Trainer defaults from ``PL_TRAINER_*`` environment variables, as Lightning reads them.

Lightning lets a cluster script set any Trainer argument without touching the code:
``PL_TRAINER_MAX_STEPS=7 python train.py`` builds ``Trainer(max_steps=7)``. An argument given in the code
wins over the variable; the variable wins over the argument's default. Values are read as Python literals
(``"7"`` is ``7``, ``"False"`` is ``False``, ``"[0, 1]"`` a list); anything else stays a string.
"""

from __future__ import annotations

import functools
import inspect
import os
from ast import literal_eval
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

PREFIX = "PL_TRAINER_"


def env_defaults(parameters: list[str], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``PL_TRAINER_<NAME>`` values set (and non-empty) for ``parameters``, parsed as literals.

    Example:
        ```python
        env_defaults(["max_steps", "logger"], {"PL_TRAINER_MAX_STEPS": "7"})  # {"max_steps": 7}
        ```
    """
    source = os.environ if environ is None else environ
    found: dict[str, Any] = {}
    for name in parameters:
        raw = source.get(PREFIX + name.upper())
        if raw is None or raw == "":
            continue
        try:
            found[name] = literal_eval(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            # not a literal: a plain string such as "cpu" or "ddp_spawn" (these are all literal_eval raises)
            found[name] = raw
    return found


def defaults_from_env_vars(init: _F) -> _F:
    """Wrap ``__init__`` so that ``PL_TRAINER_*`` variables fill the arguments the caller left out.

    Example:
        ```python
        class Trainer:
            @defaults_from_env_vars
            def __init__(self, *, max_steps: int = -1) -> None: ...
        ```
    """
    names = [
        name
        for name, parameter in inspect.signature(init).parameters.items()
        if name != "self" and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]

    @functools.wraps(init)
    def insert_env_defaults(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Positional arguments pass through unchanged: the Trainer's are keyword-only, so they stay an error.
        return init(self, *args, **{**env_defaults(names), **kwargs})

    return insert_env_defaults  # type: ignore[return-value]


__all__ = ["defaults_from_env_vars", "env_defaults"]
