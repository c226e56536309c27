"""The Trainer's checkpoints as Lightning's ``.ckpt`` files, and Lightning's files read into a TrainModule.

A Lightning ``.ckpt`` is one ``torch.save`` dict: ``state_dict`` (the module's weights), ``epoch``,
``global_step``, ``pytorch-lightning_version``, ``loops``, ``callbacks``, ``optimizer_states``,
``lr_schedulers``, ``hparams_name``/``hyper_parameters`` and whatever ``on_save_checkpoint`` added.
``trainer.save_checkpoint("x.ckpt")`` (and ``ModelCheckpoint``) writes that shape through the single-file
checkpoint layout, with fabricx's exact-resume entries (loader position, RNG, metric states) under reserved
``__fabricx_*`` keys Lightning ignores: ``torch.load(path, weights_only=True)`` and Lightning's
``LightningModule.load_from_checkpoint`` read it; ``fit(ckpt_path=...)`` and ``load_from_checkpoint`` read
Lightning's files and fabricx's, code-free.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, MutableSequence
from pathlib import Path
from typing import Any

import torch

from fabricx.checkpoint.numpy_scalars import is_numpy_scalar
from fabricx.train.module.hparams_files import as_config
from fabricx.utilities.exceptions import FabricxError

_PLAIN = (bool, int, float, str, type(None))


#: What `_plain_copy` returns for a value a code-free file cannot hold.
_NOT_PLAIN: Any = object()


def _plain_copy(value: Any) -> Any:
    """``value`` as plain data (any mapping as a ``dict``, tuples and other mutable sequences as lists, so an
    OmegaConf config's values are read, interpolations resolved), or ``_NOT_PLAIN``."""
    if isinstance(value, _PLAIN) or is_numpy_scalar(value):
        return value
    try:
        if isinstance(value, Mapping):
            copied = {key: _plain_copy(value[key]) for key in value}
            plain = all(isinstance(key, str) for key in copied) and _NOT_PLAIN not in copied.values()
            return copied if plain else _NOT_PLAIN
        if isinstance(value, (list, tuple, MutableSequence)):
            items = [_plain_copy(item) for item in value]
            return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    except Exception:  # an OmegaConf value that is missing (``???``) or an interpolation that does not resolve
        return _NOT_PLAIN
    return _NOT_PLAIN


def hparams_entries(owner: Any, prefix: str = "") -> dict[str, Any]:
    """The checkpoint entries of ``owner``'s hyper-parameters, as Lightning writes them: ``hparams_name`` (the
    ``__init__`` argument they came in as), ``hyper_parameters`` and, for a config kept whole (an OmegaConf
    ``DictConfig``), ``hparams_type``; ``prefix`` is ``"datamodule_"`` for a data module's.

    A code-free file holds plain values only (numbers, NumPy's included, strings, ``None``, lists and dicts of
    them; configs are stored as such dicts). Others (a module passed to ``__init__``, a ``functools.partial``,
    ...) are left out and named under `HPARAMS_LEFT_OUT_KEY` with their types: pass them again to
    ``load_from_checkpoint(path, name=value)``, or ``save_hyperparameters(ignore=[...])`` them.

    Example:
        ```python
        hparams_entries(module)  # {"hparams_name": "kwargs", "hyper_parameters": {"lr": 0.1}}
        ```
    """
    hparams = getattr(owner, "hparams", None)
    if not hparams:
        return {}
    plain: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    for key in list(hparams):
        try:
            value = hparams[key]
        except Exception:  # a missing or unresolvable OmegaConf value
            left_out[str(key)] = "value that could not be read"
            continue
        copied = _plain_copy(value) if isinstance(key, str) else _NOT_PLAIN
        if copied is _NOT_PLAIN:
            left_out[str(key)] = type(value).__name__
        else:
            plain[key] = copied
    entries: dict[str, Any] = {
        f"{prefix}hparams_name": owner.__dict__.get("_hparams_name", "kwargs"),
        f"{prefix}hyper_parameters": plain,
    }
    if not isinstance(hparams, dict):
        entries[f"{prefix}hparams_type"] = type(hparams).__name__  # Lightning reads a name as a plain dict
    configs = [key for key in plain if _is_config(hparams[key])]
    if configs:  # stored as plain data; loading makes them configs again (Lightning pickles the objects)
        entries[f"__fabricx_{prefix}hparams_configs__"] = configs
    if left_out and not prefix:
        entries[HPARAMS_LEFT_OUT_KEY] = left_out
    return entries


def _is_config(value: Any) -> bool:
    """Whether ``value`` is an OmegaConf config (``DictConfig``, ``ListConfig``), without importing OmegaConf."""
    return type(value).__module__.partition(".")[0] == "omegaconf"


def _as_configs(hparams: dict[str, Any], keys: Any) -> dict[str, Any]:
    """``hparams`` with the values under ``keys`` (saved from OmegaConf configs) made configs again."""
    if not isinstance(keys, list):
        return hparams
    return {key: as_config(value) if key in keys else value for key, value in hparams.items()}


def _as_saved_type(hparams: dict[str, Any], saved_type: Any) -> Any:
    """The loaded hyper-parameters as the config type they were saved from (an OmegaConf ``DictConfig``)."""
    return as_config(hparams) if saved_type == "DictConfig" else hparams


#: Names of hyper-parameters already warned about (a ModelCheckpoint saves many times; one warning says it).
_WARNED_LEFT_OUT: set[tuple[str, ...]] = set()


def warn_left_out_hparams(module: Any, left_out: Mapping[str, str], path: str | os.PathLike) -> None:
    """Say, once per module class and names, which hyper-parameters a checkpoint leaves out and how to load it."""
    key = (type(module).__qualname__, *sorted(left_out))
    if not left_out or key in _WARNED_LEFT_OUT:
        return
    _WARNED_LEFT_OUT.add(key)
    from fabricx.utilities.rank_zero import rank_zero_warn

    listed = ", ".join(f"{name!r} (a {kind})" for name, kind in left_out.items())
    passed = ", ".join(f"{name}=..." for name in left_out)
    rank_zero_warn(
        f"save_hyperparameters() recorded values a checkpoint does not store: {listed}. fabricx checkpoints hold "
        "no code, only plain values (numbers, strings, None, lists and dicts of them), so these are left out of "
        f"{os.fspath(path)} and of every later checkpoint of this module. Pass them again when loading: "
        f"{type(module).__name__}.load_from_checkpoint(path, {passed}); or leave them out of the hyper-parameters "
        f"with save_hyperparameters(ignore={sorted(left_out)!r})."
    )


def lightning_version() -> str:
    """The installed Lightning's version (``lightning`` or ``pytorch-lightning``); ``2.5.0`` without Lightning.

    Written as a checkpoint's ``pytorch-lightning_version`` (Lightning picks its migrations by it) and given as
    ``__version__`` by `fabricx.compat.lightning`.

    Example:
        ```python
        lightning_version()  # "2.6.6"
        ```
    """
    from importlib.metadata import PackageNotFoundError, version

    for name in ("lightning", "pytorch-lightning"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "2.5.0"


#: fabricx's exact-resume entries (Lightning ignores them): progress, metric states (the loader position's key,
#: `TRAIN_LOADER_KEY`, is in `fabricx.checkpoint.contents`, which lends it to ranks the saving run did not have).
PROGRESS_KEY = "__fabricx_trainer__"
METRICS_KEY = "__fabricx_metrics__"
DATAMODULE_KEY = "__fabricx_datamodule__"
#: The key of each optimizer a strategy's engines store with their models (DeepSpeed), one entry each, in place of
#: ``optimizer_states``: ``__fabricx_engine_optimizer_0__``, ...
ENGINE_OPTIMIZER_KEY = "__fabricx_engine_optimizer_{}__"
#: The names and types of the hyper-parameters left out of the file (see `hparams_entries`).
HPARAMS_LEFT_OUT_KEY = "__fabricx_hparams_left_out__"
_HPARAMS_KEYS = ("hparams_name", "hyper_parameters", "hparams_type")
#: Every entry `hparams_entries` may write (a resume restores none of them: they are read by `load_from_checkpoint`).
HPARAMS_ENTRY_KEYS = (
    *(f"{prefix}{key}" for prefix in ("", "datamodule_") for key in _HPARAMS_KEYS),
    *(f"__fabricx_{prefix}hparams_configs__" for prefix in ("", "datamodule_")),
    HPARAMS_LEFT_OUT_KEY,
)


def is_lightning_file(path: str | os.PathLike) -> bool:
    """A regular file (a ``.ckpt`` of Lightning's or fabricx's Trainer, or any single-file checkpoint)."""
    return Path(path).is_file()


def weights_and_hparams(
    path: str | os.PathLike, state: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(weights, hyper_parameters, whole checkpoint)`` of a ``.ckpt`` file's or a Trainer checkpoint folder's
    contents (``state``, read from ``path``)."""
    if "state_dict" in state and isinstance(state["state_dict"], Mapping):
        hparams: dict[str, Any] = {}
        for key in ("hparams", "module_arguments", "hyper_parameters"):  # Lightning's past keys, then its own
            if isinstance(state.get(key), Mapping):
                hparams.update(state[key])
        return dict(state["state_dict"]), hparams, state
    weights = state.get("module")  # a checkpoint folder of an earlier fabricx Trainer
    if not isinstance(weights, Mapping):
        raise FabricxError(
            f"{path} holds no full module state (keys: {sorted(state)[:10]}; sharded, or not a Trainer "
            "checkpoint). Consolidate it first with `fabricx consolidate`, or load it with "
            "trainer.fit(model, ckpt_path=...)."
        )
    extra = dict(state.get("extra") or {})
    return dict(weights), dict((state.get("hparams") or {}).get("hyper_parameters") or {}), extra


def restore_weights(module: torch.nn.Module, path: str | os.PathLike, contents: dict[str, Any]) -> None:
    """Load the weights of a Trainer checkpoint's ``contents`` (read from ``path``) into ``module`` and call its
    ``on_load_checkpoint``."""
    weights, _, checkpoint = weights_and_hparams(path, contents)
    module.load_state_dict(weights)
    hook = getattr(module, "on_load_checkpoint", None)
    if callable(hook):
        hook(checkpoint)


def module_from_checkpoint(
    cls: type,
    path: str | os.PathLike,
    map_location: Any,
    hparams_file: str | os.PathLike | None,
    strict: bool | None,
    overrides: dict[str, Any],
) -> Any:
    """Build ``cls`` from the checkpoint's hyper-parameters (updated with ``overrides``) and load its weights.

    There is no Fabric here (``TrainModule.load_from_checkpoint`` is a class method): the file is read on this
    process through the gate (`fabricx.checkpoint.format.read_checkpoint`).
    """
    from fabricx.checkpoint.format import read_checkpoint

    from_file = None if hparams_file is None else _read_hparams_file(hparams_file)
    module = _build_module(cls, path, read_checkpoint(path).shared, strict, overrides, from_file)
    if map_location is not None and not callable(map_location) and not isinstance(map_location, Mapping):
        module.to(map_location)
    return module


def module_from_state(cls: type, checkpoint: dict[str, Any], strict: bool | None = None, **overrides: Any) -> Any:
    """Build ``cls`` from a checkpoint already read, as Lightning's ``lightning.pytorch.core.saving._load_state``
    (which libraries that read checkpoints through their own I/O call, and the alias serves).

    Example:
        ```python
        module = module_from_state(Classifier, checkpoint, strict=True, lr=0.01)
        ```
    """
    return _build_module(cls, "<checkpoint>", checkpoint, strict, overrides)


def datamodule_from_checkpoint(
    cls: type, path: str | os.PathLike, hparams_file: str | os.PathLike | None, overrides: dict[str, Any]
) -> Any:
    """Build the DataModule class ``cls`` from a Trainer checkpoint's ``datamodule_hyper_parameters`` (updated with
    ``overrides``) and restore its ``state_dict()`` entry, as Lightning's ``LightningDataModule.load_from_checkpoint``.
    """
    from fabricx.checkpoint.format import read_checkpoint

    checkpoint = read_checkpoint(path).shared
    saved = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    from_file = None if hparams_file is None else _read_hparams_file(hparams_file)
    datamodule = cls(**_init_arguments(cls, path, saved, checkpoint, "datamodule_", overrides, from_file))
    if cls.__qualname__ in checkpoint:
        datamodule.load_state_dict(checkpoint[cls.__qualname__])
    return datamodule


def _build_module(
    cls: type,
    path: str | os.PathLike,
    contents: dict[str, Any],
    strict: bool | None,
    overrides: dict[str, Any],
    from_file: Mapping[str, Any] | None = None,
) -> Any:
    weights, hparams, checkpoint = weights_and_hparams(path, contents)
    module = cls(**_init_arguments(cls, path, hparams, checkpoint, "", overrides, from_file))
    hook = getattr(module, "on_load_checkpoint", None)
    if callable(hook):
        hook(checkpoint)
    module.load_state_dict(weights, strict=True if strict is None else strict)
    return module


def _init_arguments(
    cls: type,
    path: str | os.PathLike,
    saved: Mapping[str, Any],
    checkpoint: Mapping[str, Any],
    prefix: str,
    overrides: dict[str, Any],
    from_file: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``__init__`` arguments that rebuild ``cls`` from its ``saved`` hyper-parameters, as Lightning's: an
    ``hparams_file`` replaces them, keyword arguments override them (inside a config given whole too), and
    hyper-parameters given whole to ``save_hyperparameters()`` go back to the argument they came in."""
    if from_file is None:
        saved = _as_configs(dict(saved), checkpoint.get(f"__fabricx_{prefix}hparams_configs__"))
    hparams = {**(saved if from_file is None else from_file), **overrides}
    parameters = inspect.signature(cls.__init__).parameters
    named = [p.name for p in list(parameters.values())[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    given_as = checkpoint.get(f"{prefix}hparams_name")
    if given_as in named:
        arguments = {given_as: _as_saved_type(hparams, checkpoint.get(f"{prefix}hparams_type")), **overrides}
    else:
        arguments = hparams
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        arguments = {k: v for k, v in arguments.items() if k in parameters}
    left_out = {} if prefix else dict(checkpoint.get(HPARAMS_LEFT_OUT_KEY) or {})
    _check_arguments(cls, path, parameters, arguments, left_out)
    return arguments


def _check_arguments(
    cls: type,
    path: str | os.PathLike,
    parameters: Mapping[str, inspect.Parameter],
    arguments: Mapping[str, Any],
    left_out: Mapping[str, str],
) -> None:
    """Refuse (``TypeError``, as calling ``__init__`` would) when ``__init__`` needs arguments the checkpoint does
    not hold, naming them and how to pass them; warn when left-out ones fall back to ``__init__``'s defaults."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    own = list(parameters.values())[1:]  # without self
    missing = [p.name for p in own if p.kind in kinds and p.default is p.empty and p.name not in arguments]
    defaulted = [name for name in left_out if name not in arguments and name not in missing]
    name = cls.__name__
    if defaulted:
        from fabricx.utilities.rank_zero import rank_zero_warn

        listed = ", ".join(f"{key!r} (a {left_out[key]})" for key in defaulted)
        rank_zero_warn(
            f"{name}.load_from_checkpoint({os.fspath(path)!r}): {listed} were left out of the checkpoint when it "
            "was saved (it holds only plain values) and are not passed here, so __init__'s defaults are used. "
            f"Pass them to load the module as it was saved: {name}.load_from_checkpoint(path, "
            f"{', '.join(f'{key}=...' for key in defaulted)})."
        )
    if not missing:
        return
    reasons = [
        f"{key!r} was a {left_out[key]}, left out when saving (fabricx checkpoints hold only plain values: numbers, "
        "strings, None, lists and dicts of them)"
        if key in left_out
        else f"{key!r} was not recorded by save_hyperparameters()"
        for key in missing
    ]
    raise TypeError(
        f"{name}.load_from_checkpoint({os.fspath(path)!r}) cannot build the module: {name}.__init__() needs "
        f"{', '.join(repr(key) for key in missing)}, which the checkpoint does not hold ({'; '.join(reasons)}). "
        f"Pass them: {name}.load_from_checkpoint(path, {', '.join(f'{key}=...' for key in missing)})."
    )


def _read_hparams_file(path: str | os.PathLike) -> dict[str, Any]:
    from fabricx.train.module.hparams_files import load_hparams_from_tags_csv, load_hparams_from_yaml

    # As Lightning: a missing file gives no hyper-parameters (they replace the checkpoint's), with a warning.
    if str(path).lower().endswith((".yaml", ".yml")):
        return dict(load_hparams_from_yaml(path) or {})
    if str(path).lower().endswith(".csv"):
        return load_hparams_from_tags_csv(path)
    raise ValueError(f"hparams_file={os.fspath(path)!r}: .csv, .yml or .yaml is required for `hparams_file`.")


class ModuleWeights:
    """The ``state_dict`` entry when it is not the set-up module itself: the weights as the ``on_save_checkpoint``
    hooks left them (saving), or nothing (loading into a module whose weights were restored before
    ``configure_optimizers``). Either way the gradients of an accumulation window in progress are saved from, and
    restored to, ``module``.

    Example:
        ```python
        state["state_dict"] = ModuleWeights(trainer.model, checkpoint["state_dict"])
        ```
    """

    def __init__(self, module: Any, weights: Mapping[str, Any] | None = None) -> None:
        self.window_gradients_of = module
        self._weights = weights

    def state_dict(self) -> Mapping[str, Any]:
        return self._weights if self._weights is not None else {}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """The weights are in place already."""


class HParamsState:
    """The module's plain hyper-parameters inside a fabricx checkpoint (for ``load_from_checkpoint``)."""

    def __init__(self, module: torch.nn.Module | None) -> None:
        self.module = module

    def state_dict(self) -> dict[str, Any]:
        return {"hyper_parameters": hparams_entries(self.module).get("hyper_parameters", {})}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore: the module was built by the user."""


__all__ = [
    "datamodule_from_checkpoint",
    "hparams_entries",
    "is_lightning_file",
    "lightning_version",
    "module_from_checkpoint",
    "restore_weights",
    "warn_left_out_hparams",
]
