"""Hyper-parameters: an attribute-access dict and the collection of ``__init__`` arguments."""

from __future__ import annotations

import inspect
from argparse import Namespace
from collections.abc import Mapping, MutableMapping, Sequence
from types import FrameType
from typing import Any, NamedTuple


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


def _same(value: Any, given: Any) -> bool:
    """Whether an ``__init__`` argument is the object given (equal, as Lightning matches it; never raising)."""
    if value is given:
        return True
    try:
        return bool(value == given)
    except Exception:  # an array's elementwise comparison, or a type that refuses to compare
        return False


class Recorded(NamedTuple):
    """What `save_hyperparameters()` records: the values, and the ``__init__`` argument they came in as.

    ``name`` is what Lightning writes as a checkpoint's ``hparams_name``: ``"kwargs"`` for arguments collected by
    name, the argument's name when one object (a dict, a ``Namespace``, an OmegaConf config) was given whole,
    ``None`` when nothing was recorded or the object is no argument. Loading passes the values back under it.
    """

    values: MutableMapping[str, Any]
    name: str | None


def collect_init_arguments(
    frame: FrameType | None, names: Sequence[Any] = (), ignore: str | Sequence[str] | None = None
) -> Recorded:
    """The ``__init__`` arguments of the object whose ``__init__`` runs in ``frame`` (and its subclasses'
    ``__init__`` frames above it), filtered by ``names`` and ``ignore`` as ``save_hyperparameters`` does.

    A single mapping or ``Namespace`` in ``names`` is taken as the hyper-parameters themselves: a ``dict`` or a
    ``Namespace`` as a ``dict`` of its entries, another mutable mapping (an OmegaConf ``DictConfig``) as the
    object itself, as Lightning keeps it.

    Example:
        ```python
        def __init__(self, config):
            recorded = collect_init_arguments(inspect.currentframe(), (config,))  # name == "config"
        ```
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
    ignored = [ignore] if isinstance(ignore, str) else list(ignore or ())
    if len(names) == 1 and isinstance(names[0], (Mapping, Namespace)):
        given = names[0]
        name = next((key for key, value in collected.items() if key not in ignored and _same(value, given)), None)
        if isinstance(given, MutableMapping) and not isinstance(given, dict):
            return Recorded(given, name)
        values = dict(vars(given)) if isinstance(given, Namespace) else dict(given)
    elif names:
        unknown = [n for n in names if not isinstance(n, str) or n not in collected]
        if unknown:
            raise ValueError(
                f"save_hyperparameters{tuple(names)!r}: {unknown!r} are not arguments of __init__ "
                f"(which has {sorted(collected)}). Name __init__ arguments, or pass one dict."
            )
        values, name = {name: collected[name] for name in names}, "kwargs"
    else:
        values, name = collected, "kwargs"
    for key in ignored:
        values.pop(key, None)
    return Recorded(values, name if values else None)


def record_hyperparameters(attributes: dict[str, Any], recorded: Recorded, extra: Mapping[str, Any]) -> None:
    """Keep what `collect_init_arguments` recorded (and ``extra`` values) in an object's ``__dict__``, as
    Lightning's ``_set_hparams``: a dict's entries join the hyper-parameters already recorded; a config given
    whole replaces them.

    Example:
        ```python
        record_hyperparameters(module.__dict__, Recorded({"lr": 0.1}, "kwargs"), {})  # module.hparams.lr == 0.1
        ```
    """
    current = attributes.get("_hparams")
    values = recorded.values
    if isinstance(values, dict):
        if not isinstance(current, dict):
            current = attributes["_hparams"] = AttributeDict()
        current.update(values)
    else:
        current = attributes["_hparams"] = values
    current.update(extra)
    attributes["_hparams_name"] = recorded.name


__all__ = ["AttributeDict", "Recorded", "collect_init_arguments", "record_hyperparameters"]
