"""The one checkpoint pipeline: what a user passes to ``fabric.save``/``fabric.load`` becomes files and back.

Every strategy saves and loads through `save_fabric_checkpoint()` and `load_fabric_checkpoint()`.
They decide which entries are shared by every rank (model, optimizer, plain values) and which belong
to one rank (data loader positions, random generators), write them with the on-disk layout of
`fabricx.checkpoint.format` through the strategy's `fabricx.checkpoint.io.CheckpointIO`,
and apply a loaded checkpoint to live objects. A strategy that stores some entries its own way
(DTensor shards, a DeepSpeed engine's files) says so with an `EntryStorage`; the rest of the
pipeline (names, per-rank entries, world-size changes, strictness, errors) is the same for all.

The strategy is used only through the methods it is handed to (``global_rank``, ``world_size``,
``barrier``, ``broadcast``, the state-dict methods, ``checkpoint_io`` and ``checkpoint_storage()``);
this module imports no strategy.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.format import (
    RESERVED_PREFIX,
    CheckpointWriter,
    LoadedCheckpoint,
    default_io,
    is_reserved,
    read_checkpoint,
)
from fabricx.checkpoint.io import CheckpointIO
from fabricx.utilities.exceptions import CheckpointError, FabricxError

if TYPE_CHECKING:
    from fabricx.checkpoint.host import CheckpointHost


class EntryStorage(ABC):
    """How a strategy stores some entries of the user's state itself (shards, an engine's own files).

    The pipeline hands it the entries it `claims()`; everything else goes through the shared layout.
    Its `record()` lands in ``meta.json``'s ``extra_meta[meta_key]``, and `stored_entries()`
    reads the keys back from there, so any strategy (and ``fabricx consolidate``) can read them in full.

    Example:
        ```python
        class MyStorage(EntryStorage):
            meta_key = "my_shards"
            def claims(self, key, obj): return isinstance(unwrap_object(obj), MyShardedModule)
            ...
        ```
    """

    #: ``extra_meta`` key of this storage's record (one of `STORAGE_KINDS`).
    meta_key: str = ""
    #: Whether the claimed entries' full state (the strategy's ``get_module_state_dict``/``get_optimizer_state``)
    #: can be written into one file instead (the single-file layout); ``False`` refuses a file path.
    full_state_in_one_file: bool = True

    def claims(self, key: str, obj: Any) -> bool:
        """Whether this storage writes ``state[key]`` itself."""
        return False

    def check_filter(self, keys: list[str], filter: Mapping[str, Callable] | None) -> None:
        """Refuse a ``save(filter=...)`` on claimed entries that this storage cannot filter."""

    @abstractmethod
    def record(self, entries: dict[str, Any]) -> dict[str, Any]:
        """The JSON record for ``meta.json`` describing the claimed ``entries``."""

    @abstractmethod
    def save(self, staging: Path, entries: dict[str, Any], filter: Mapping[str, Callable] | None) -> dict[str, Any]:
        """Every rank: write the claimed entries under ``staging``; return extra shared (JSON-side) entries."""

    @abstractmethod
    def load(self, loaded: LoadedCheckpoint, entries: dict[str, Any], strict: bool) -> None:
        """Every rank: restore the live objects ``entries`` (stored by this storage) from ``loaded``."""


class CheckpointKeyError(CheckpointError, KeyError):
    """An entry asked for is not in the checkpoint (a ``KeyError`` too, for code that catches that)."""

    __str__ = CheckpointError.__str__  # KeyError would quote the whole message


class CheckpointStateError(CheckpointError, FabricxError):
    """A saved state an object refused (e.g. a data loader position that cannot resume here).

    Also a `FabricxError`, the type those objects raise themselves.
    """


def is_per_rank(obj: Any) -> bool:
    return bool(getattr(obj, "_fabricx_per_rank", False))


def unwrap_object(obj: Any) -> Any:
    """The user's own module or optimizer behind a fabricx wrapper (others unchanged).

    A data loader wrapper stays itself: its own state (epoch, position, random state) is what resumes.
    """
    inner = getattr(obj, "_fabricx_unwrapped", None)
    return inner if isinstance(inner, Module | Optimizer) else obj


def object_state(strategy: CheckpointHost, obj: Any) -> Any:
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
    strategy: CheckpointHost, state: dict[str, Any], filter: dict[str, Callable] | None = None
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


def checkpoint_io_of(strategy: Any) -> CheckpointIO:
    """The strategy's `CheckpointIO` (``checkpoint_io``), or the default one."""
    io = getattr(strategy, "checkpoint_io", None)
    return io if io is not None else default_io()


def entry_storage_of(strategy: Any) -> EntryStorage | None:
    """The `EntryStorage` of a strategy that stores some entries itself, or ``None``."""
    get = getattr(strategy, "checkpoint_storage", None)
    return cast("EntryStorage | None", get()) if callable(get) else None


def claimed_entries(storage: EntryStorage | None, state: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``state`` that ``storage`` writes itself."""
    if storage is None:
        return {}
    return {key: obj for key, obj in state.items() if storage.claims(key, obj)}


@dataclass
class DirectorySave:
    """One save in the directory layout, as every rank plans it before writing: what goes through the
    strategy's own storage (``claimed``), what through the shared layout (``shared`` on rank 0,
    ``per_rank`` on each rank), and the one `CheckpointWriter` of the save. A synchronous and an
    asynchronous save differ only in when (and from which copy) they write it.
    """

    storage: EntryStorage | None
    claimed: dict[str, Any]
    plain: dict[str, Any]
    shared: dict[str, Any]
    per_rank: dict[str, Any]
    writer: CheckpointWriter

    def write_claimed(self, staging: Path, filter: Mapping[str, Callable] | None) -> dict[str, Any]:
        """Write the claimed entries now (every rank); the shared entries they add."""
        if not self.claimed or self.storage is None:
            return {}
        return self.storage.save(staging, self.claimed, filter)


def plan_directory_save(
    strategy: CheckpointHost,
    path: str,
    state: dict[str, Any],
    filter: Mapping[str, Callable] | None,
    barrier: Callable[[], Any],
) -> DirectorySave:
    """Split ``state`` for a directory-layout save and build its writer (``barrier`` waits for every
    rank; used only with more than one). Every rank calls it at the same point: it broadcasts the
    save's token.

    Example:
        ```python
        plan = plan_directory_save(strategy, "ckpt/step_10", state, None, strategy.barrier)
        ```
    """
    storage = entry_storage_of(strategy)
    claimed = claimed_entries(storage, state)
    plain = {key: obj for key, obj in state.items() if key not in claimed}
    if claimed and storage is not None:
        storage.check_filter(list(claimed), dict(filter) if filter else None)
    plain_filter = {key: keep for key, keep in (filter or {}).items() if key in plain} or None
    shared, per_rank = split_state(strategy, plain, plain_filter)
    extra_meta = {storage.meta_key: storage.record(claimed)} if claimed and storage is not None else None
    distributed = strategy.world_size > 1
    writer = CheckpointWriter(
        path,
        rank=strategy.global_rank,
        world_size=strategy.world_size,
        barrier=barrier if distributed else None,
        token=strategy.broadcast(uuid.uuid4().hex) if distributed else None,
        extra_meta=extra_meta,
        io=checkpoint_io_of(strategy),
    )
    return DirectorySave(storage, claimed, plain, shared, per_rank, writer)


def write_and_commit(
    plan: DirectorySave,
    shared: dict[str, Any],
    per_rank: dict[str, Any],
    finish_claimed: Callable[[], dict[str, Any]],
    agreement: Callable[[bool], bool],
    before: Callable[[], None] | None = None,
) -> None:
    """Write this rank's files of ``plan`` and commit when every rank did (`CheckpointWriter.commit_agreed`).

    The one writing path of a synchronous save (in the foreground, from the live state) and an
    asynchronous one (in the background, from its host copy; ``before`` finishes that copy).
    ``finish_claimed`` returns the shared entries the strategy's own storage added.
    """
    error: BaseException | None = None
    try:
        if before is not None:
            before()
        shared = {**shared, **finish_claimed()}
        plan.writer.write_shared(shared)
        plan.writer.write_rank(per_rank)
    except BaseException as caught:
        error = caught
    plan.writer.commit_agreed(error, agreement)


def rank_agreement(strategy: CheckpointHost) -> Callable[[bool], bool]:
    """``agreement(ok)``: whether ``ok`` holds on every rank (a collective; ``ok`` itself alone).

    On one all-reduce of the background saves' gloo group where torch.distributed runs; otherwise
    through the strategy's own ``broadcast``, one per rank.
    """
    from fabricx.checkpoint.background import agree, background_group

    if strategy.world_size == 1:
        return lambda ok: ok
    group = background_group()
    if group is not None:
        return lambda ok: agree(ok, group)
    return lambda ok: all(bool(strategy.broadcast(ok, src=rank)) for rank in range(strategy.world_size))


def save_fabric_checkpoint(
    strategy: CheckpointHost,
    path: str,
    state: dict[str, Any],
    filter: dict[str, Callable] | None = None,
    layout: str | None = None,
) -> None:
    """Write ``state`` to ``path`` with the layout its name asks for, every rank taking part.

    A path naming a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) becomes one ``torch.save`` file (the
    single-file layout); any other path a fabricx checkpoint directory. ``layout`` overrides the choice.
    The same pipeline as `fabricx.checkpoint.async_save.save_fabric_checkpoint_async()`, waited for:
    the files are written here, from the live state.

    Example:
        ```python
        save_fabric_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model, "step": 10})
        save_fabric_checkpoint(fabric.strategy, "out/model.pth", {"model": model})  # one file
        ```
    """
    from fabricx.checkpoint.layouts import layout_for

    if layout_for(path, layout) == "single_file":
        save_one_file(strategy, path, state, filter)
        return
    from fabricx.checkpoint.background import wait_for_pending_save

    wait_for_pending_save()  # the agreement shares its group with a background save's thread
    plan = plan_directory_save(strategy, path, state, filter, strategy.barrier)
    agreement = rank_agreement(strategy)
    staging = plan.writer.begin()
    try:
        written = plan.write_claimed(staging, filter)
    except BaseException:
        plan.writer.abort()
        raise
    write_and_commit(plan, plan.shared, plan.per_rank, lambda: written, agreement)


def save_one_file(
    strategy: CheckpointHost,
    path: str,
    state: dict[str, Any],
    filter: dict[str, Callable] | None = None,
    *,
    asynchronous: bool = False,
) -> Any:
    """Write ``state`` as one file (`fabricx.checkpoint.layouts.single_file`), every rank taking part.

    Entries a strategy stores itself are written as their full state (FSDP gathers the shards to rank 0,
    as Lightning's ``state_dict_type="full"`` does); a strategy that has no full state for them (DeepSpeed
    engines) is refused. With ``asynchronous`` rank 0 writes in the background and an ``AsyncSave`` is returned.

    Example:
        ```python
        save_one_file(fabric.strategy, "out/model.pth", {"model": model, "step": 3})
        ```
    """
    from fabricx.checkpoint.layouts.single_file import save_single_file, save_single_file_async

    storage = entry_storage_of(strategy)
    claimed = claimed_entries(storage, state)
    if claimed and storage is not None and not storage.full_state_in_one_file:
        raise CheckpointError(
            f"Cannot save {sorted(claimed)} into the single file {path}: {type(strategy).__name__} stores them as "
            "its engines' own files, which have no one-file form. Save to a path without a file suffix (or pass "
            "layout='directory') for a checkpoint directory; `fabricx consolidate` turns its weights into one file."
        )
    shared, per_rank = split_state(strategy, state, filter)
    extra_keys = [key for key in shared if is_reserved(key)]
    save = save_single_file_async if asynchronous else save_single_file
    return save(strategy, path, shared, per_rank, extra_keys=extra_keys, storage=checkpoint_io_of(strategy))


# ------------------------------------------------------------------------ entries stored by a strategy


def stored_entries(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{state key: storage meta key}`` for every entry a strategy stored its own way.

    Example:
        ```python
        stored_entries(read_meta("ckpt"))  # {"model": "fabricx_sharded", "optimizer": "fabricx_sharded"}
        ```
    """
    from fabricx.checkpoint.deepspeed_consolidate import META_KEY as DEEPSPEED_KEY
    from fabricx.checkpoint.sharded import META_KEY as SHARDED_KEY
    from fabricx.checkpoint.sharded import sharded_info

    found: dict[str, str] = {}
    info = sharded_info(meta)
    if info is not None:
        found.update({key: SHARDED_KEY for key in info["entries"]})
    extra = meta.get("extra_meta") or {}
    record = extra.get(DEEPSPEED_KEY) if isinstance(extra, Mapping) else None
    if record is not None:
        models = record.get("models") if isinstance(record, Mapping) else None
        if not isinstance(models, Mapping):
            raise CheckpointError(f"The checkpoint metadata's {DEEPSPEED_KEY!r} record is damaged: {record!r}.")
        found.update({key: DEEPSPEED_KEY for key in models})
        for entry in models.values():  # an engine's optimizer lives in its model's files
            optimizer = entry.get("optimizer") if isinstance(entry, Mapping) else None
            if isinstance(optimizer, str):
                found[optimizer] = DEEPSPEED_OPTIMIZER
    return found


#: What `stored_entries()` says of an optimizer stored inside its DeepSpeed model's engine files.
DEEPSPEED_OPTIMIZER = "deepspeed_optimizer"
_ENGINE_KINDS = ("deepspeed", DEEPSPEED_OPTIMIZER)


def read_full(loaded: LoadedCheckpoint, keys: list[str]) -> dict[str, Any]:
    """The entries ``keys`` stored by a strategy (shards, engine files) as full CPU tensors, in this process.

    A DeepSpeed optimizer's state has no full form; it is left out.

    Example:
        ```python
        read_full(read_checkpoint("ckpt"), ["model"])["model"]  # a plain state dict
        ```
    """
    from fabricx.checkpoint.deepspeed_consolidate import META_KEY as DEEPSPEED_KEY
    from fabricx.checkpoint.sharded import REST_KEY, read_full_entries, sharded_info

    stored = stored_entries(loaded.meta)
    full: dict[str, Any] = {}
    sharded = [key for key in keys if key in stored and stored[key] not in _ENGINE_KINDS]
    if sharded:
        info = sharded_info(loaded.meta)
        assert info is not None
        kinds = {key: info["entries"][key] for key in sharded}
        full.update(read_full_entries(loaded.path / info["directory"], loaded.shared.get(REST_KEY, {}), kinds))
    engines = [key for key in keys if stored.get(key) == DEEPSPEED_KEY]
    if engines:
        from fabricx.checkpoint.deepspeed_consolidate import deepspeed_model_states

        full.update(deepspeed_model_states(loaded.path, keys=engines))
    return full


def apply_loaded_state(
    strategy: CheckpointHost,
    state: dict[str, Any],
    shared: dict[str, Any],
    per_rank: dict[str, Any] | None,
    strict: bool,
    path: Any = None,
) -> dict[str, Any]:
    """Load checkpoint contents into the objects of ``state``; return what was not restored.

    Anything in the checkpoint that does not fit the objects raises `CheckpointError` naming
    ``path`` (the checkpoint) and the entry.
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
        _load_into(strategy, state, key, obj, value, strict, path)
    if missing and strict:
        raise CheckpointKeyError(
            f"The checkpoint {path or ''} has no entries for {missing}; it holds "
            f"{sorted(k for k in shared if not is_reserved(k))}. "
            "Pass strict=False to load what is there, or remove those keys from the state you load into."
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


def _native(stored_kind: str | None, native_kind: str | None) -> bool:
    if stored_kind is None or native_kind is None:
        return False
    return stored_kind == native_kind or (stored_kind == DEEPSPEED_OPTIMIZER and native_kind == "deepspeed")


def load_fabric_checkpoint(
    strategy: CheckpointHost, path: str, state: dict[str, Any] | None = None, strict: bool = True
) -> dict[str, Any]:
    """Read a checkpoint; restore it into ``state`` (or return all of it when ``state`` is None).

    The same for every strategy: entries this strategy stores its own way and that the checkpoint
    stored that way are restored by its `EntryStorage`; entries another strategy stored are read
    in full and loaded like any other; per-rank entries follow `rank_entries()` (world-size changes).

    Example:
        ```python
        remainder = load_fabric_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model})
        ```
    """
    for attempt in range(_LOAD_ATTEMPTS):
        loaded = read_checkpoint(path, rank=strategy.global_rank, io=checkpoint_io_of(strategy), keep_pin=True)
        try:
            result = _load_read(strategy, loaded, path, state, strict)
        finally:
            if loaded.pin is not None:
                loaded.pin.close()
                loaded.pin = None
        if result is not None:
            return result
        # A strategy's own files are read by name after the rest: another job replaced the checkpoint
        # meanwhile, so they may be another save's. Alone, load it again; with several ranks each would
        # decide on its own (and a collective load would hang), so say so.
        if strategy.world_size > 1 or attempt == _LOAD_ATTEMPTS - 1:
            raise CheckpointError(
                f"The checkpoint {path} was replaced by another save while being loaded, so its files may come "
                "from two saves; nothing of it counts. Load it again once no job is rewriting it."
            )
    raise AssertionError("unreachable")  # pragma: no cover


#: How many times a single process loads again when another save replaced the checkpoint meanwhile.
_LOAD_ATTEMPTS = 5


def _load_read(
    strategy: CheckpointHost, loaded: LoadedCheckpoint, path: str, state: dict[str, Any] | None, strict: bool
) -> dict[str, Any] | None:
    """Read ``loaded``'s strategy-stored entries and apply everything into ``state``; ``None`` when the
    directory was replaced while its files were read (then nothing but the strategy's own entries was
    applied, and the caller loads again)."""
    from fabricx.checkpoint.sharded import REST_KEY

    stored = stored_entries(loaded.meta)
    shared = {key: value for key, value in loaded.shared.items() if key != REST_KEY}
    if state is None:
        merged = {**shared, **(loaded.per_rank or {}), **read_full(loaded, list(stored))}
        if stored and loaded.pin is not None and not loaded.pin.unchanged():
            return None
        return {key: value for key, value in merged.items() if not is_reserved(key)}
    storage = entry_storage_of(strategy)
    claimed = claimed_entries(storage, state)
    native_kind = storage.meta_key if storage is not None else None
    native = {key: obj for key, obj in claimed.items() if _native(stored.get(key), native_kind)}
    # Entries stored by another strategy (or by this one for objects it does not claim now) load in full.
    foreign = [key for key in state if key in stored and key not in native]
    shared.update(read_full(loaded, foreign))
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
    remainder = apply_loaded_state(strategy, others, shared, rank_entries(loaded, state), strict, path=loaded.path)
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
    if any(is_per_rank(obj) and not is_reserved(key) for key, obj in state.items()):
        return _borrowed_rank_state(loaded.path)
    return None


def _borrowed_rank_state(path: Any) -> dict[str, Any] | None:
    """Rank 0's per-rank entries for a rank the saving run did not have (more processes now).

    Random states are left out (each rank keeps its own); a data loader receives a state that names
    the world size it was saved with and decides whether it can continue from it.
    """
    from fabricx.checkpoint.format import rank_stem
    from fabricx.checkpoint.serialization import json_path, load

    directory = Path(path)
    if not directory.is_dir() or not json_path(directory, rank_stem(0)).exists():
        return None
    entries = load(directory, rank_stem(0))
    if not isinstance(entries, dict):
        return None
    return {key: value for key, value in entries.items() if not is_reserved(key)}


__all__ = [
    "RESERVED_PREFIX",
    "CheckpointError",
    "CheckpointKeyError",
    "CheckpointStateError",
    "DirectorySave",
    "EntryStorage",
    "checkpoint_io_of",
    "claimed_entries",
    "entry_storage_of",
    "load_fabric_checkpoint",
    "plan_directory_save",
    "rank_agreement",
    "rank_entries",
    "read_full",
    "save_fabric_checkpoint",
    "save_one_file",
    "split_state",
    "stored_entries",
    "unwrap_object",
    "write_and_commit",
]
