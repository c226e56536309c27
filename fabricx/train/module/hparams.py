"""Hyper-parameters: an attribute-access dict and the collection of ``__init__`` arguments."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from argparse import Namespace
from collections.abc import Mapping, MutableMapping, Sequence
from types import FrameType
from typing import Any, NamedTuple

import torch


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
                f"hparams has no {key!r}; recorded are {sorted(self, key=str)}. Pass it to __init__ before "
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
    #: Names to drop from hyper-parameters recorded before (a subclass ignoring what its base recorded).
    ignored: Sequence[str] = ()


#: What one object given to ``save_hyperparameters()`` may not be (Lightning's message names them).
_PRIMITIVE_TYPES = (bool, int, float, str)


def collect_init_arguments(
    frame: FrameType | None, names: Sequence[Any] = (), ignore: str | Sequence[str] | None = None, owner: Any = None
) -> Recorded | None:
    """What ``save_hyperparameters(*names, ignore=...)`` records, called from ``frame``, as Lightning's.

    The ``__init__`` arguments are collected from every ``__init__`` frame up the stack whose ``self`` records
    hyper-parameters (subclasses calling ``super().__init__``, and, as in Lightning, an object built inside another's
    ``__init__``); a dataclass ``owner`` gives its ``init`` fields instead. ``ignore`` drops names. With no
    ``names`` all are recorded; with one object that is not a name (a dict, a ``Namespace``, an OmegaConf config)
    that object is (a ``dict``/``Namespace`` as a dict of its entries, another mutable mapping as itself); else the
    arguments named. ``None``: one empty container was given, and nothing is recorded.

    Example:
        ```python
        def __init__(self, config):
            recorded = collect_init_arguments(inspect.currentframe(), (config,))  # name == "config"
        ```
    """
    if len(names) == 1 and not isinstance(names[0], str) and not names[0]:
        return None
    ignored = [ignore] if isinstance(ignore, str) else [name for name in ignore or () if isinstance(name, str)]
    if owner is not None and dataclasses.is_dataclass(owner):
        collected = {f.name: getattr(owner, f.name) for f in dataclasses.fields(owner) if f.init}
    else:
        collected = _collect_frames(frame)
    collected = {key: value for key, value in collected.items() if key not in ignored}
    given = [name for name in names if not isinstance(name, str)]
    if len(given) == 1:
        config = given[0]
        name = next((key for key, value in collected.items() if _same(value, config)), None)
        if isinstance(config, _PRIMITIVE_TYPES):
            raise ValueError(
                f"Primitives {_PRIMITIVE_TYPES} are not allowed. save_hyperparameters() takes one dict, Namespace or "
                f"OmegaConf config, or the names of __init__ arguments as strings; got {config!r}."
            )
        if isinstance(config, Namespace):
            return Recorded(dict(vars(config)), name, ignored)
        if isinstance(config, dict):
            return Recorded(dict(config), name, ignored)
        if isinstance(config, MutableMapping):
            return Recorded(config, name, ignored)
        raise ValueError(
            f"Unsupported config type of {type(config)}. save_hyperparameters() takes one dict, Namespace or "
            "OmegaConf config, or the names of __init__ arguments as strings."
        )
    if names:
        unknown = [n for n in names if isinstance(n, str) and n not in collected and n not in ignored]
        if unknown:
            raise ValueError(
                f"save_hyperparameters{tuple(names)!r}: {unknown!r} are not arguments of __init__ "
                f"(which has {sorted(collected)}). Name __init__ arguments, or pass one dict."
            )
        return Recorded({name: collected[name] for name in names if name in collected}, "kwargs", ignored)
    return Recorded(collected, "kwargs" if collected else None, ignored)


def _collect_frames(frame: FrameType | None) -> dict[str, Any]:
    """The ``__init__`` arguments of the hyper-parameter recording objects whose ``__init__`` frames run from
    ``frame`` up (the outermost frame's values win)."""
    chain: list[dict[str, Any]] = []
    current = frame
    while current is not None:
        found = _init_frame_arguments(current)
        if found is not None and isinstance(found[0], HyperparametersMixin):
            chain.append(found[1])
        elif chain:
            break
        current = current.f_back
    collected: dict[str, Any] = {}
    for arguments in chain:  # innermost first
        collected.update(arguments)
    return collected


def record_hyperparameters(attributes: dict[str, Any], recorded: Recorded, extra: Mapping[str, Any]) -> None:
    """Keep what `collect_init_arguments` recorded (and ``extra`` values) in an object's ``__dict__``, as
    Lightning's ``_set_hparams``: a dict's entries join the hyper-parameters already recorded (less the ignored
    names); a config given whole replaces them. Warns about modules among them, as Lightning does.

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
    for key in recorded.ignored:
        current.pop(key, None)
    attributes["_hparams_name"] = recorded.name
    for key in list(current):
        try:
            value = current[key]
        except Exception:  # an OmegaConf value that is missing (``???``): read when it is used, not here
            continue
        if isinstance(value, torch.nn.Module):
            from fabricx.utilities.rank_zero import rank_zero_warn

            rank_zero_warn(
                f"Attribute {key!r} is an instance of `nn.Module` and is already saved during checkpointing."
                f" It is recommended to ignore them using `self.save_hyperparameters(ignore=[{key!r}])`."
            )


def is_picklable(obj: object) -> bool:
    """Whether ``pickle.dumps(obj)`` works (Lightning's ``lightning.pytorch.utilities.is_picklable``).

    Example:
        ```python
        is_picklable(lambda x: x)  # False
        ```
    """
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False
    return True


def drop_unpicklable_hparams(hparams: MutableMapping[str, Any]) -> None:
    """Remove, with Lightning's warning, the hyper-parameters that cannot be pickled (a lambda passed to
    ``__init__``), as Lightning does when a run starts."""
    from fabricx.utilities.rank_zero import rank_zero_warn

    for key in [key for key, value in hparams.items() if not is_picklable(value)]:
        rank_zero_warn(
            f"Attribute '{key}' removed from hparams because it cannot be pickled. You can suppress this warning by"
            f" setting `self.save_hyperparameters(ignore=['{key}'])`."
        )
        del hparams[key]


def hparams_to_log(module: Any, datamodule: Any) -> dict[str, Any] | None:
    """The hyper-parameters the loggers get when a fit starts, as Lightning's: the module's and the data module's
    `hparams_initial` (those whose `save_hyperparameters()` did not say ``logger=False``), merged; ``None`` when
    neither recorded any. A key both hold with different values raises Lightning's ``RuntimeError``.

    Example:
        ```python
        hparams_to_log(module, datamodule)  # {"lr": 0.1, "batch_size": 32}
        ```
    """
    ours = module.hparams_initial if module.__dict__.get("_log_hyperparams", False) else None
    logs = datamodule is not None and datamodule.__dict__.get("_log_hyperparams", False)
    theirs = datamodule.hparams_initial if logs and datamodule is not None else None
    if ours is not None and theirs is not None:
        clashing = [
            key
            for key in ours.keys() & theirs.keys()
            if key != "_class_path" and (type(ours[key]) is not type(theirs[key]) or not _same(ours[key], theirs[key]))
        ]
        if clashing:
            raise RuntimeError(
                f"Error while merging hparams: the keys {clashing} are present in both the LightningModule's and "
                "LightningDataModule's hparams but have different values. Rename one of them, or pass "
                "save_hyperparameters(logger=False) to one of the two."
            )
        hparams = {**ours, **theirs}
    elif ours is not None or theirs is not None:
        hparams = dict(ours if ours is not None else theirs or {})
    else:
        return None
    return {key: value for key, value in hparams.items() if key != "_class_path"}  # LightningCLI's own entry


class HyperparametersMixin:
    """`save_hyperparameters()`, `hparams` and `hparams_initial`: what `TrainModule` and `DataModule` share, as
    Lightning's ``HyperparametersMixin``.

    State lives in the instance ``__dict__`` (``_hparams``, ``_hparams_initial``, ``_hparams_name``), so recording
    works before ``__init__`` of an ``nn.Module`` has run (pytorch-forecasting's models record first).

    Example:
        ```python
        class Digits(DataModule):
            def __init__(self, batch_size: int = 32):
                super().__init__()
                self.save_hyperparameters()  # self.hparams.batch_size == 32
        ```
    """

    #: Lightning's checkpoint keys of these hyper-parameters (a data module's are prefixed ``datamodule_``).
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    @property
    def hparams(self) -> AttributeDict | MutableMapping[str, Any]:
        """Hyperparameters recorded by `save_hyperparameters()` (``self.hparams.lr`` or ``["lr"]``; sent to the
        loggers at fit start and stored in checkpoints): an `AttributeDict`, or the OmegaConf ``DictConfig`` given
        whole to `save_hyperparameters()`, as in Lightning."""
        hparams = self.__dict__.setdefault("_hparams", AttributeDict())
        if isinstance(hparams, dict) and not isinstance(hparams, AttributeDict):
            hparams = self.__dict__["_hparams"] = AttributeDict(hparams)
        return hparams

    @property
    def hparams_initial(self) -> AttributeDict | MutableMapping[str, Any]:
        """A copy of `hparams` as `save_hyperparameters()` recorded them."""
        return copy.deepcopy(self.__dict__.get("_hparams_initial", AttributeDict()))

    def save_hyperparameters(
        self, *names: Any, ignore: str | Sequence[str] | None = None, frame: Any = None, logger: bool = True,
        **values: Any,
    ) -> None:
        """Record the caller's ``__init__`` arguments (all, those named, or one dict or config given) as `hparams`.

        As in Lightning, the ``__init__`` arguments of subclasses calling ``super().__init__`` are collected too;
        ``ignore`` drops names (e.g. modules passed in); ``logger=False`` keeps them from the loggers.
        ``load_from_checkpoint()`` builds the object again from them (one object given whole goes back to the
        argument it came in).

        Example:
            ```python
            def __init__(self, lr=0.1, hidden=64):
                super().__init__()
                self.save_hyperparameters()  # self.hparams.lr == 0.1
            ```
        """
        if frame is None:
            current = inspect.currentframe()
            frame = current.f_back if current is not None else None
            del current
        recorded = collect_init_arguments(frame, names, ignore, owner=self)
        del frame
        if recorded is None:  # one empty container: nothing to record, as in Lightning
            return
        record_hyperparameters(self.__dict__, recorded, values)
        self.__dict__["_hparams_initial"] = copy.deepcopy(self.hparams)
        self.__dict__["_log_hyperparams"] = logger

    def remove_ignored_hparams(self, ignore_list: Sequence[str]) -> None:
        """Drop hyper-parameters a base class recorded (a subclass that does not want them saved).

        Example:
            ```python
            self.remove_ignored_hparams(["net"])
            ```
        """
        for key in ignore_list:
            self.hparams.pop(key, None)


__all__ = [
    "AttributeDict",
    "HyperparametersMixin",
    "Recorded",
    "collect_init_arguments",
    "drop_unpicklable_hparams",
    "hparams_to_log",
    "is_picklable",
    "record_hyperparameters",
]
