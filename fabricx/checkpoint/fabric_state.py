"""The user's live objects and a read checkpoint: which entries a strategy stored its own way, and how
the loaded contents are restored into the objects of ``fabric.load(path, state)``.

Anything in the checkpoint that does not fit the objects raises `fabricx.utilities.exceptions.CheckpointError`
naming the checkpoint and the entry; entries another strategy stored (shards, engine files) are read in full.

Example:

```python
remainder = apply_checkpoint(strategy, read_checkpoint("ckpt", keep_pin=True), "ckpt", state, strict=True)
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.contents import (
    claimed_entries,
    entry_storage_of,
    is_per_rank,
    is_reserved,
    lent_to_new_ranks,
    unwrap_object,
)
from fabricx.checkpoint.hand_over import hand_over
from fabricx.checkpoint.records import stored_keys, stored_record
from fabricx.checkpoint.safe_read import check_optimizer_state, refuse_misfit
from fabricx.utilities.exceptions import CheckpointError, FabricxError

if TYPE_CHECKING:
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.loaded import LoadedCheckpoint


class CheckpointKeyError(CheckpointError, KeyError):
    """Entries asked for are not in the checkpoint (a ``KeyError`` too, for code that catches that); ``missing``
    names them."""

    __str__ = CheckpointError.__str__  # KeyError would quote the whole message

    def __init__(self, message: str, missing: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.missing = tuple(missing)


class CheckpointStateError(CheckpointError, FabricxError):
    """A saved state an object refused (e.g. a data loader position that cannot resume here).

    Also a `FabricxError`, the type those objects raise themselves.
    """


# ------------------------------------------------------------------------ entries stored by a strategy


def stored_entries(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{state key: record key}`` for every entry a strategy stored its own way (see `fabricx.checkpoint.records`).

    Example:
        ```python
        stored_entries(read_meta("ckpt"))  # {"model": "fabricx_sharded", "optimizer": "fabricx_sharded"}
        ```
    """
    return stored_keys(meta)


def read_full(loaded: LoadedCheckpoint, keys: list[str]) -> dict[str, Any]:
    """The entries ``keys`` stored by a strategy (shards, engine files) as full CPU tensors, in this process.

    Each is read by the `fabricx.checkpoint.records.StoredRecord` of the record that lists it; an entry with
    no full form (a DeepSpeed optimizer's state) is left out.

    Example:
        ```python
        read_full(read_checkpoint("ckpt"), ["model"])["model"]  # a plain state dict
        ```
    """
    stored = stored_entries(loaded.meta)
    by_record: dict[str, list[str]] = {}
    for key in keys:
        if key in stored:
            by_record.setdefault(stored[key], []).append(key)
    full: dict[str, Any] = {}
    for record, wanted in by_record.items():
        full.update(stored_record(record).read_full(loaded, wanted))
    return full


def apply_loaded_state(
    strategy: CheckpointHost,
    state: dict[str, Any],
    shared: dict[str, Any],
    per_rank: dict[str, Any] | None,
    strict: bool,
    path: Any = None,
    owned: bool = False,
) -> dict[str, Any]:
    """Load checkpoint contents into the objects of ``state``; return what was not restored.

    Anything in the checkpoint that does not fit the objects raises `CheckpointError` naming
    ``path`` (the checkpoint) and the entry. ``owned``: the contents' tensors belong to this load alone
    (read fresh, dropped afterwards), so a module may take them instead of a copy (`fabricx.checkpoint.hand_over`).
    """
    remaining = dict(shared)
    rank_remaining = dict(per_rank or {})
    missing = []
    for key, obj in list(state.items()):
        source = rank_remaining if is_per_rank(obj) else remaining
        if key not in source:
            # a per-rank entry saved by fewer ranks falls back to nothing; reserved keys are optional
            if not is_reserved(key):
                missing.append(key)
            continue
        value = source.pop(key)
        _load_into(strategy, state, key, obj, value, strict, path, owned=owned)
    if missing and strict:
        raise CheckpointKeyError(
            f"The checkpoint {path or ''} has no entries for {missing}; it holds "
            f"{sorted(k for k in shared if not is_reserved(k))}. "
            "Pass strict=False to load what is there, or remove those keys from the state you load into.",
            missing,
        )
    return {key: value for key, value in remaining.items() if not is_reserved(key)}


def _load_into(
    strategy: CheckpointHost,
    state: dict[str, Any],
    key: str,
    obj: Any,
    value: Any,
    strict: bool,
    path: Any = None,
    label: str | None = None,
    owned: bool = False,
) -> None:
    target = unwrap_object(obj)
    label = label or repr(key)
    where = f"entry {label} of the checkpoint {path}" if path is not None else f"checkpoint entry {label}"
    try:
        if isinstance(target, Module):
            _check_module_entry(target, value, where)
            if owned:
                hand_over(target, value, strict)
            strategy.load_module_state_dict(target, value, strict=strict)
        elif isinstance(target, Optimizer):
            check_optimizer_state(target, value, where)
            strategy.load_optimizer_state(target, value)
        elif hasattr(target, "load_state_dict") and callable(target.load_state_dict):
            target.load_state_dict(value)
        elif isinstance(target, dict) and isinstance(value, dict) and _holds_stateful(target):
            for sub_key, sub_obj in list(target.items()):
                if sub_key in value:
                    sub_label = f"{label}[{sub_key!r}]"
                    _load_into(strategy, target, sub_key, sub_obj, value[sub_key], strict, path, sub_label, owned)
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
    target = f"model {type(module).__name__}"
    refuse_misfit(where, target, problems, "Build the model with the configuration the checkpoint was saved with.")


def _holds_stateful(container: dict[str, Any]) -> bool:
    return any(hasattr(unwrap_object(v), "load_state_dict") or isinstance(v, dict) for v in container.values())


def apply_checkpoint(
    strategy: CheckpointHost,
    loaded: LoadedCheckpoint,
    path: str,
    state: dict[str, Any] | None,
    strict: bool,
    kept: bool = False,
) -> dict[str, Any] | None:
    """Read ``loaded``'s strategy-stored entries and apply everything into ``state`` (all of it is returned
    when ``state`` is None); ``None`` when the directory was replaced while its files were read (then
    nothing but the strategy's own entries was applied, and the caller reads it again). ``kept``: the caller
    keeps ``loaded`` for another load, so its tensors are copied into modules, never handed over.

    Example:

    ```python
    remainder = apply_checkpoint(strategy, loaded, "ckpt", {"model": model}, strict=True)
    ```
    """
    stored = stored_entries(loaded.meta)
    shared = dict(loaded.shared)  # a record's own shared entries sit under reserved keys, never reported
    if state is None:
        merged = {**shared, **(loaded.per_rank or {}), **read_full(loaded, list(stored))}
        if stored and loaded.pin is not None and not loaded.pin.unchanged():
            return None
        return {key: value for key, value in merged.items() if not is_reserved(key)}
    storage = entry_storage_of(strategy)
    claimed = claimed_entries(storage, state)
    native_kind = storage.meta_key if storage is not None else None
    native = {key: obj for key, obj in claimed.items() if native_kind is not None and stored.get(key) == native_kind}
    # Entries stored by another strategy (or by this one for objects it does not claim now) load in full.
    foreign = [key for key in state if key in stored and key not in native]
    shared.update(read_full(loaded, foreign))
    engine_only = [key for key in foreign if key not in shared]
    if engine_only and strict:
        kinds = sorted({stored[key] for key in engine_only})
        raise CheckpointError(
            f"The checkpoint {loaded.path} holds {engine_only} in {' and '.join(kinds)} engine files, which only "
            f"that strategy reads (a ZeRO optimizer's state has no full form), and {type(strategy).__name__} is "
            "loading it. Resume with the strategy that saved it, on any number of processes (e.g. "
            "strategy='deepspeed_stage_2' with devices=1), or leave those entries out of the state you load into "
            "(the weights load in full under any strategy)."
        )
    unrequested = [key for key in stored if key not in state]
    extra = read_full(loaded, unrequested) if unrequested else {}
    if native and storage is not None:
        try:
            storage.load(loaded, native, strict)
        except CheckpointError:
            raise
        except Exception as error:
            raise CheckpointError(
                f"Cannot restore {sorted(native)} from the checkpoint {loaded.path}: {type(error).__name__}: "
                f"{str(error).strip()[:1000]}"
            ) from error
    if stored and loaded.pin is not None and not loaded.pin.unchanged():
        return None  # before anything else is applied: the caller loads again or raises
    others = {key: obj for key, obj in state.items() if key not in native}
    owned = loaded.fresh and not kept
    remainder = apply_loaded_state(
        strategy, others, shared, rank_entries(loaded, state), strict, path=loaded.path, owned=owned
    )
    state.update(others)  # plain values were replaced inside ``others``
    remainder.update(extra)
    return remainder


def rank_entries(loaded: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """This rank's per-rank checkpoint entries; for a rank the saving run did not have (more
    processes now) rank 0's, so its data loaders can decide whether they can continue (see
    `_borrowed_rank_state()`).

    Example:
        ```python
        remainder = apply_loaded_state(strategy, state, loaded.shared, rank_entries(loaded, state), strict)
        ```
    """
    if loaded.per_rank is not None:
        return loaded.per_rank
    if any(is_per_rank(obj) and lent_to_new_ranks(key) for key, obj in state.items()):
        return _borrowed_rank_state(loaded.path)
    return None


def _borrowed_rank_state(path: Any) -> dict[str, Any] | None:
    """Rank 0's per-rank entries for a rank the saving run did not have (more processes now).

    Random states and gradients are left out (each rank keeps its own, `lent_to_new_ranks`); a data loader
    receives a state that names the world size it was saved with and decides whether it can continue from it.
    """
    from fabricx.checkpoint.format import rank_stem
    from fabricx.checkpoint.serialization import json_path, load

    directory = Path(path)
    if not directory.is_dir() or not json_path(directory, rank_stem(0)).exists():
        return None
    entries = load(directory, rank_stem(0))
    if not isinstance(entries, dict):
        return None
    return {key: value for key, value in entries.items() if lent_to_new_ranks(key)}


__all__ = [
    "CheckpointKeyError",
    "CheckpointStateError",
    "apply_checkpoint",
    "apply_loaded_state",
    "rank_entries",
    "read_full",
    "stored_entries",
]
