"""Turning what a user passes to ``fabric.save``/``fabric.load`` into checkpoint contents and back.

The on-disk layout belongs to :mod:`fabricx.checkpoint.format`; this module decides which entries
are shared by every rank (model, optimizer, plain values) and which belong to one rank (data
loader positions, random generators), and applies a loaded checkpoint to live objects.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.format import read_checkpoint, write_checkpoint
from fabricx.utilities.exceptions import CheckpointError, FabricxError

if TYPE_CHECKING:
    from fabricx.strategies.strategy import Strategy

#: Keys fabricx adds to every checkpoint for its own state.
RESERVED_PREFIX = "__fabricx_"


class CheckpointKeyError(CheckpointError, KeyError):
    """An entry asked for is not in the checkpoint (a ``KeyError`` too, for code that catches that)."""

    __str__ = CheckpointError.__str__  # KeyError would quote the whole message


class CheckpointStateError(CheckpointError, FabricxError):
    """A saved state an object refused (e.g. a data loader position that cannot resume here).

    Also a :class:`FabricxError`, the type those objects raise themselves.
    """


def is_per_rank(obj: Any) -> bool:
    return bool(getattr(obj, "_fabricx_per_rank", False))


def unwrap_object(obj: Any) -> Any:
    """The user's own module or optimizer behind a fabricx wrapper (others unchanged).

    A data loader wrapper stays itself: its own state (epoch, position, random state) is what resumes.
    """
    inner = getattr(obj, "_fabricx_unwrapped", None)
    return inner if isinstance(inner, Module | Optimizer) else obj


def object_state(strategy: Strategy, obj: Any) -> Any:
    """What to store for one entry of the user's state dict."""
    obj = unwrap_object(obj)
    if isinstance(obj, Module):
        return strategy.get_module_state_dict(obj)
    if isinstance(obj, Optimizer):
        return strategy.get_optimizer_state(obj)
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return obj.state_dict()
    if isinstance(obj, dict):
        return {key: object_state(strategy, value) for key, value in obj.items()}
    return obj


def split_state(
    strategy: Strategy, state: dict[str, Any], filter: dict[str, Callable] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the user's state into (shared, per-rank) checkpoint contents."""
    shared: dict[str, Any] = {}
    per_rank: dict[str, Any] = {}
    for key, obj in state.items():
        target = per_rank if is_per_rank(obj) else shared
        value = object_state(strategy, obj)
        if filter and key in filter:
            if not isinstance(value, dict):
                raise TypeError(f"filter[{key!r}] was given but state[{key!r}] does not produce a dict to filter.")
            keep = filter[key]
            value = {name: item for name, item in value.items() if keep(name, item)}
        target[key] = value
    return shared, per_rank


def save_fabric_checkpoint(
    strategy: Strategy, path: str, state: dict[str, Any], filter: dict[str, Callable] | None = None
) -> None:
    """Write ``state`` to ``path`` as a fabricx checkpoint directory, every rank taking part."""
    shared, per_rank = split_state(strategy, state, filter)
    token = strategy.broadcast(uuid.uuid4().hex) if strategy.world_size > 1 else None
    write_checkpoint(
        path,
        shared if strategy.is_global_zero else None,
        per_rank,
        rank=strategy.global_rank,
        world_size=strategy.world_size,
        barrier=strategy.barrier if strategy.world_size > 1 else None,
        token=token,
    )


def apply_loaded_state(
    strategy: Strategy,
    state: dict[str, Any],
    shared: dict[str, Any],
    per_rank: dict[str, Any] | None,
    strict: bool,
    path: Any = None,
) -> dict[str, Any]:
    """Load checkpoint contents into the objects of ``state``; return what was not restored.

    Anything in the checkpoint that does not fit the objects raises :class:`CheckpointError` naming
    ``path`` (the checkpoint) and the entry.
    """
    remaining = dict(shared)
    rank_remaining = dict(per_rank or {})
    missing = []
    for key, obj in list(state.items()):
        source = rank_remaining if is_per_rank(obj) else remaining
        if key not in source:
            # a per-rank entry saved by fewer ranks falls back to nothing; reserved keys are optional
            if not key.startswith(RESERVED_PREFIX):
                missing.append(key)
            continue
        value = source.pop(key)
        _load_into(strategy, state, key, obj, value, strict, path)
    if missing and strict:
        raise CheckpointKeyError(
            f"The checkpoint {path or ''} has no entries for {missing}; it holds "
            f"{sorted(k for k in shared if not k.startswith(RESERVED_PREFIX))}. "
            "Pass strict=False to load what is there, or remove those keys from the state you load into."
        )
    return {key: value for key, value in remaining.items() if not key.startswith(RESERVED_PREFIX)}


def _load_into(
    strategy: Strategy,
    state: dict[str, Any],
    key: str,
    obj: Any,
    value: Any,
    strict: bool,
    path: Any = None,
    label: str | None = None,
) -> None:
    target = unwrap_object(obj)
    label = label or repr(key)
    where = f"entry {label} of the checkpoint {path}" if path is not None else f"checkpoint entry {label}"
    try:
        if isinstance(target, Module):
            _check_module_entry(target, value, where)
            strategy.load_module_state_dict(target, value, strict=strict)
        elif isinstance(target, Optimizer):
            strategy.load_optimizer_state(target, value)
        elif hasattr(target, "load_state_dict") and callable(target.load_state_dict):
            target.load_state_dict(value)
        elif isinstance(target, dict) and isinstance(value, dict) and _holds_stateful(target):
            for sub_key, sub_obj in list(target.items()):
                if sub_key in value:
                    sub_label = f"{label}[{sub_key!r}]"
                    _load_into(strategy, target, sub_key, sub_obj, value[sub_key], strict, path, sub_label)
                elif strict:
                    raise CheckpointKeyError(f"The {where} has no {sub_key!r}; it holds {sorted(value, key=str)}.")
        else:
            state[key] = value
    except CheckpointError:
        raise
    except FabricxError as error:
        raise CheckpointStateError(f"Cannot restore the {where}: {error}") from error
    except Exception as error:  # torch's own mismatch errors, or a damaged state a load_state_dict chokes on
        hint = " Pass strict=False to load only the keys that match." if strict and "key" in str(error) else ""
        raise CheckpointError(
            f"Cannot restore the {where} into {type(target).__name__}: {type(error).__name__}: "
            f"{str(error).strip()[:1000]}{hint}"
        ) from error


def _dtype_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating point" if dtype.is_floating_point else "integer"


def _check_module_entry(module: Module, value: Any, where: str) -> None:
    """Refuse saved tensors whose shape, or kind of dtype, differs from the model's.

    A different float width (a float32 checkpoint into a bfloat16 model) is converted as torch does;
    an integer tensor for a float parameter (or the reverse) is refused, because that is not the
    same model.
    """
    if not isinstance(value, Mapping):
        raise CheckpointError(
            f"The {where} holds a {type(value).__name__}, not a model state dict; it cannot be loaded into "
            f"{type(module).__name__}."
        )
    problems = []
    for name, tensor in module.state_dict().items():
        if name not in value or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            continue  # missing keys are the strategy's (strict) business; sharded tensors check themselves
        saved = value[name]
        if not isinstance(saved, torch.Tensor):
            problems.append(f"{name!r} is a {type(saved).__name__} in the file, a tensor in the model")
        elif saved.shape != tensor.shape:
            problems.append(f"{name!r} has shape {list(saved.shape)} in the file, {list(tensor.shape)} in the model")
        elif _dtype_kind(saved.dtype) != _dtype_kind(tensor.dtype):
            problems.append(f"{name!r} is {saved.dtype} in the file, {tensor.dtype} in the model")
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise CheckpointError(
            f"The {where} does not fit the model {type(module).__name__}: {shown}. Build the model with the "
            "configuration the checkpoint was saved with."
        )


def _holds_stateful(container: dict[str, Any]) -> bool:
    return any(hasattr(unwrap_object(v), "load_state_dict") or isinstance(v, dict) for v in container.values())


def load_fabric_checkpoint(
    strategy: Strategy, path: str, state: dict[str, Any] | None = None, strict: bool = True
) -> dict[str, Any]:
    """Read a checkpoint; restore it into ``state`` (or return all of it when ``state`` is None)."""
    loaded = read_checkpoint(path, rank=strategy.global_rank)
    _merge_sharded_entries(loaded)
    if state is None:
        merged = dict(loaded.shared)
        merged.update({k: v for k, v in (loaded.per_rank or {}).items()})
        return {key: value for key, value in merged.items() if not key.startswith(RESERVED_PREFIX)}
    per_rank = rank_entries(loaded, state)
    return apply_loaded_state(strategy, state, loaded.shared, per_rank, strict, path=loaded.path)


def _merge_sharded_entries(loaded: Any) -> None:
    """Read the shards of a sharded (FSDP/TP) checkpoint as full tensors, so any strategy can load it."""
    from fabricx.checkpoint.sharded import REST_KEY, read_full_entries, sharded_info

    info = sharded_info(loaded.meta)
    if info is None:
        return
    rest = loaded.shared.pop(REST_KEY, {})
    loaded.shared.update(read_full_entries(loaded.path / info["directory"], rest, info["entries"]))


def rank_entries(loaded: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's per-rank checkpoint entries; for a rank the saving run did not have (more
    processes now) rank 0's, so its data loaders can decide whether they can continue (see
    :func:`_borrowed_rank_state`). Strategies with their own ``load_checkpoint`` pass this to
    :func:`apply_loaded_state` instead of ``loaded.per_rank``.

    Example::

        remainder = apply_loaded_state(strategy, state, loaded.shared, rank_entries(loaded, state), strict)
    """
    if loaded.per_rank is not None:
        return loaded.per_rank
    if any(is_per_rank(obj) and not key.startswith(RESERVED_PREFIX) for key, obj in state.items()):
        return _borrowed_rank_state(loaded.path)
    return None


def _borrowed_rank_state(path: Any) -> dict[str, Any] | None:
    """Rank 0's per-rank entries for a rank the saving run did not have (more processes now).

    Random states are left out (each rank keeps its own); a data loader receives a state that names
    the world size it was saved with and decides whether it can continue from it.
    """
    from pathlib import Path

    from fabricx.checkpoint.format import rank_stem
    from fabricx.checkpoint.serialization import json_path, load

    directory = Path(path)
    if not directory.is_dir() or not json_path(directory, rank_stem(0)).exists():
        return None
    entries = load(directory, rank_stem(0))
    if not isinstance(entries, dict):
        return None
    return {key: value for key, value in entries.items() if not key.startswith(RESERVED_PREFIX)}


__all__ = ["CheckpointError", "load_fabric_checkpoint", "rank_entries", "save_fabric_checkpoint"]
