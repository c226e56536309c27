"""A mistyped keyword argument is refused as Python refuses it, with the closest accepted name suggested."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def suggest_keywords(init: _F) -> _F:
    """Wrap ``__init__`` so that an unknown keyword raises ``TypeError`` naming the closest accepted one.

    Python's own message (``got an unexpected keyword argument 'max_epoch'``) with Python 3.13's suggestion
    added (``Did you mean 'max_epochs'?``) on every Python version; the check runs once per construction.

    Example:
        ```python
        class Trainer:
            @suggest_keywords
            def __init__(self, *, max_epochs: int | None = None) -> None: ...

        Trainer(max_epoch=3)  # TypeError: ... Did you mean 'max_epochs'?
        ```
    """
    parameters = inspect.signature(init).parameters.values()
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return init  # every keyword is accepted
    names = [
        parameter.name
        for parameter in parameters
        if parameter.name != "self" and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    accepted = frozenset(names)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in accepted:
                raise TypeError(_unexpected(f"{type(self).__name__}.__init__()", name, names))
        return init(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _unexpected(function: str, name: str, names: list[str]) -> str:
    message = f"{function} got an unexpected keyword argument '{name}'."
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f"{message} Did you mean '{close[0]}'?"
    return f"{message} The accepted keywords are: {', '.join(names)}."


__all__ = ["suggest_keywords"]
