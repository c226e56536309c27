"""Hyper-parameters: an attribute-access dict and the collection of ``__init__`` arguments."""

from __future__ import annotations

import inspect
from argparse import Namespace
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any


class AttributeDict(dict):
    """A ``dict`` whose keys are also attributes (``hparams.lr`` is ``hparams["lr"]``).

    Example:
        ```python
        hparams = AttributeDict(lr=0.1)
        hparams.lr  # 0.1
        ```
    """

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as error:
            raise AttributeError(
                f"hparams has no {key!r}; recorded are {sorted(self)}. Pass it to __init__ before "
                "save_hyperparameters(), or set self.hparams[{key!r}] yourself."
            ) from error

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        del self[key]


def get_init_args(frame: FrameType) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` (``{}`` for another frame), as Lightning's
    `lightning.pytorch.utilities.parsing.get_init_args` returns them.

    Example:
        ```python
        class Model(TrainModule):
            def __init__(self, hidden=8, **kwargs):
                super().__init__()
                self.init_args = get_init_args(inspect.currentframe())  # {"hidden": 8, ...}
        ```
    """
    found = _init_frame_arguments(frame)
    return {} if found is None else found[1]


def _init_frame_arguments(frame: FrameType) -> tuple[Any, dict[str, Any]] | None:
    """``(self, {argument: value})`` of an ``__init__`` frame, or ``None`` for another frame."""
    if frame.f_code.co_name != "__init__":
        return None
    info = inspect.getargvalues(frame)
    if not info.args:
        return None
    owner = info.locals.get(info.args[0])
    found: dict[str, Any] = {}
    for name in info.args[1:]:
        if name in info.locals:
            found[name] = info.locals[name]
    if info.varargs and info.locals.get(info.varargs):
        found[info.varargs] = info.locals[info.varargs]
    if info.keywords and isinstance(info.locals.get(info.keywords), Mapping):
        found.update(info.locals[info.keywords])
    for name in ("__class__", "frame"):
        found.pop(name, None)
    return owner, found


def collect_init_arguments(
    frame: FrameType | None, names: Sequence[Any] = (), ignore: str | Sequence[str] | None = None
) -> dict[str, Any]:
    """The ``__init__`` arguments of the object whose ``__init__`` runs in ``frame`` (and its subclasses'
    ``__init__`` frames above it), filtered by ``names`` and ``ignore`` as ``save_hyperparameters`` does.

    A single ``dict``/``Namespace`` in ``names`` is taken as the hyper-parameters themselves.
    """
    collected: dict[str, Any] = {}
    owner: Any = None
    current = frame
    chain: list[dict[str, Any]] = []
    while current is not None:
        found = _init_frame_arguments(current)
        if found is None:
            break
        this_owner, arguments = found
        if owner is not None and this_owner is not owner:
            break
        owner = this_owner
        chain.append(arguments)
        current = current.f_back
    for arguments in chain:  # innermost first: the outermost subclass's values win
        collected.update(arguments)
    if len(names) == 1 and isinstance(names[0], (Mapping, Namespace)):
        given = names[0]
        collected = dict(vars(given)) if isinstance(given, Namespace) else dict(given)
    elif names:
        unknown = [n for n in names if not isinstance(n, str) or n not in collected]
        if unknown:
            raise ValueError(
                f"save_hyperparameters{tuple(names)!r}: {unknown!r} are not arguments of __init__ "
                f"(which has {sorted(collected)}). Name __init__ arguments, or pass one dict."
            )
        collected = {name: collected[name] for name in names}
    ignored = [ignore] if isinstance(ignore, str) else list(ignore or ())
    for name in ignored:
        collected.pop(name, None)
    return collected


__all__ = ["AttributeDict", "collect_init_arguments"]
