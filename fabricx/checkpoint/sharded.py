"""Sharded model/optimizer state with ``torch.distributed.checkpoint`` (DCP), inside a fabricx checkpoint.

A sharded checkpoint is a normal fabricx checkpoint directory (``meta.json``, ``shared.*``,
``rank_<r>.*``) plus a DCP folder ``sharded/`` in which every rank wrote its own shards in
parallel. ``meta.json``'s ``extra_meta["fabricx_sharded"]`` lists which top-level entries live in
the DCP folder and whether each is a model or an optimizer.

Only tensors go into the DCP folder. Everything else of a sharded entry (optimizer
``param_groups``, non-tensor extra state) is stored in the shared JSON under a reserved key, and
the DCP metadata is read with an unpickler that only builds DCP's own metadata classes, so loading
never runs code stored in the checkpoint. Non-tensor items a DCP folder does hold (an optimizer's
``param_groups`` in a folder Lightning's sharded strategies wrote, see `dcp_contents()`) are read with
torch's allow-listed ``weights_only=True`` unpickler.

Optimizer states come in two forms: the *named* form of
``torch.distributed.checkpoint.state_dict`` (keyed by parameter names) for sharded I/O, and the
standard ``torch.optim`` *indexed* form (keyed by position) for full state dicts, so a full or
consolidated checkpoint loads into a plain optimizer and vice versa.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.contents import reserved_key
from fabricx.checkpoint.format import CheckpointWriter
from fabricx.checkpoint.safe_read import load_torch, plain_name, read_dcp_metadata
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.loaded import LoadedCheckpoint

__all__ = [
    "META_KEY",
    "RECORD",
    "REST_KEY",
    "SHARDED_DIR",
    "ShardedRecord",
    "dcp_contents",
    "get_model_state",
    "get_optimizer_state",
    "load_sharded",
    "optimizer_state_by_index",
    "optimizer_state_by_name",
    "read_full_entries",
    "save_sharded",
    "set_model_state",
    "set_optimizer_state",
    "sharded_info",
    "sharded_record",
    "write_sharded",
]

SHARDED_DIR = "sharded"
META_KEY = "fabricx_sharded"
#: Shared-state key holding the non-tensor parts of sharded entries.
REST_KEY = reserved_key("sharded_rest")
_FORMAT = "torch.distributed.checkpoint"
_SHOWN = 8


# ------------------------------------------------------------------------------ state dicts of live objects


def _options(full: bool, strict: bool = True) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Full state dicts are gathered to rank 0's CPU memory only; the other ranks get empty dicts.
    return StateDictOptions(full_state_dict=full, cpu_offload=full, strict=strict)


def get_model_state(module: Module, *, full: bool) -> dict[str, Any]:
    """The model's state dict: sharded DTensors (``full=False``) or full CPU tensors on rank 0 (``full=True``).

    Example:
        ```python
        state = get_model_state(fsdp_model, full=False)
        ```
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full))


def get_optimizer_state(module: Module, optimizer: Optimizer, *, full: bool) -> dict[str, Any]:
    """The optimizer's state: named and sharded (``full=False``) or indexed and full on rank 0 (``full=True``).

    Example:
        ```python
        state = get_optimizer_state(fsdp_model, optimizer, full=True)  # loads into a plain optimizer
        ```
    """
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    never_stepped = not optimizer.state
    state = get_optimizer_state_dict(module, optimizer, options=_options(full))
    if never_stepped:
        # torch fills an optimizer that has not stepped yet by a step with zero gradients, to have state to save:
        # the saving run goes on with no state, as if it had not saved, and the saved step count is 0, so that a
        # run resumed from it takes its first step as a fresh optimizer does.
        optimizer.state.clear()
        per_param = cast("dict[str, Any]", state.get("state") or {})
        state = {**state, "state": {name: _unstepped(entry) for name, entry in per_param.items()}}
    return optimizer_state_by_index(state) if full else state


def _unstepped(entry: Any) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get("step"), Tensor):
        return entry
    return {**entry, "step": torch.zeros_like(entry["step"])}


def set_model_state(module: Module, state: Mapping[str, Any], *, full: bool, strict: bool = True) -> Any:
    """Load a (full or sharded) model state dict into a sharded model; refuses mismatched shapes.

    Example:
        ```python
        set_model_state(fsdp_model, read_checkpoint("ckpt").shared["model"], full=True)
        ```
    """
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    if full:
        expected = {name: tuple(t.shape) for name, t in module.state_dict().items() if isinstance(t, Tensor)}
        found = {name: tuple(t.shape) for name, t in state.items() if isinstance(t, Tensor)}
        _raise_on_mismatch(_mismatches(expected, found), "the model state")
        if strict:
            _raise_on_key_difference(set(expected), set(found), "the model state")
    return set_model_state_dict(module, dict(state), options=_options(full, strict))


def set_optimizer_state(module: Module, optimizer: Optimizer, state: Mapping[str, Any], *, full: bool) -> None:
    """Load an optimizer state (indexed or named; full or sharded) into the optimizer of a sharded model.

    The optimizer keeps its ``param_groups`` and ``state`` objects, so wrappers and LR schedulers
    holding them see the loaded values.

    Example:
        ```python
        set_optimizer_state(fsdp_model, optimizer, plain_optimizer.state_dict(), full=True)
        ```
    """
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    named = optimizer_state_by_name(dict(state), _parameter_names(module, optimizer))
    options = _options(full)
    options.cpu_offload = False
    groups, per_param = optimizer.param_groups, optimizer.state
    set_optimizer_state_dict(module, optimizer, named, options=options)
    # Optimizer.load_state_dict replaces `param_groups` and `state` with new objects; whoever holds the
    # old ones (a wrapper, an LR scheduler) must see the loaded values, so refill the old objects.
    if optimizer.param_groups is not groups and len(optimizer.param_groups) == len(groups):
        for old, new in zip(groups, optimizer.param_groups, strict=True):
            old.clear()
            old.update(new)
        optimizer.param_groups = groups
    if optimizer.state is not per_param:
        per_param.clear()
        per_param.update(optimizer.state)
        optimizer.state = per_param
    if not named.get("state"):
        # Saved before its first step: torch builds the state with a step of zero gradients to load into, which
        # leaves a step count of 1; the optimizer must start as the one that saved it, with no state at all.
        optimizer.state.clear()


def _parameter_names(module: Module, optimizer: Optimizer) -> list[str]:
    names = {id(p): name for name, p in module.named_parameters()}
    order = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            if id(param) not in names:
                raise CheckpointError(
                    f"The optimizer {type(optimizer).__name__} holds a parameter that is not in the model "
                    f"{type(module).__name__} it was set up with; cannot match its state by name."
                )
            order.append(names[id(param)])
    return order


def optimizer_state_by_index(state: dict[str, Any]) -> dict[str, Any]:
    """Turn a named optimizer state (keys are parameter names) into ``torch.optim``'s indexed form.

    Example:
        ```python
        optimizer.load_state_dict(optimizer_state_by_index(named_state))
        ```
    """
    if not state or "param_groups" not in state:
        return state
    # DCP keeps no empty dict: an optimizer saved before its first step comes back without its "state".
    state = {"state": {}, **state}
    names = [name for group in state["param_groups"] for name in group["params"]]
    if not all(isinstance(name, str) for name in names):
        return _int_state_keys(state)
    index = {name: i for i, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in state.get("state", {}).items()},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"]]} for group in state["param_groups"]
        ],
    }


def _int_state_keys(state: dict[str, Any]) -> dict[str, Any]:
    # DCP stores every dict key as a string: an indexed state's "0" is parameter 0 again.
    per_param = state.get("state")
    if not isinstance(per_param, Mapping) or not all(isinstance(k, str) and k.isdigit() for k in per_param):
        return state
    return {**state, "state": {int(k): value for k, value in per_param.items()}}


def optimizer_state_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Turn an indexed optimizer state into the named form, given the parameter names in optimizer order.

    Example:
        ```python
        named = optimizer_state_by_name(optimizer.state_dict(), ["fc.weight", "fc.bias"])
        ```
    """
    groups = state.get("param_groups", [])
    ids = [p for group in groups for p in group["params"]]
    if all(isinstance(p, str) for p in ids):
        return state
    if len(ids) != len(names):
        raise CheckpointError(
            f"The optimizer state holds {len(ids)} parameters, the optimizer it is loaded into {len(names)}. "
            "Load it into an optimizer built over the same parameters as the saved one."
        )
    by_index = dict(zip(ids, names, strict=True))  # positional, as torch.optim matches groups
    return {
        "state": {by_index[int(i)]: value for i, value in state.get("state", {}).items()},
        "param_groups": [{**group, "params": [by_index[p] for p in group["params"]]} for group in groups],
    }


# ------------------------------------------------------------------------------------------ tensor split


def _split_tensors(state: Mapping[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a nested dict into its tensors (for DCP) and everything else (for the JSON side)."""
    tensors: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise CheckpointError(f"Sharded state dict keys must be strings; found {key!r}.")
        if isinstance(value, Tensor):
            tensors[key] = value
        elif isinstance(value, Mapping):
            inner_tensors, inner_rest = _split_tensors(value)
            if inner_tensors:
                tensors[key] = inner_tensors
            if inner_rest or not inner_tensors:
                rest[key] = inner_rest
        else:
            rest[key] = value
    return tensors, rest


def _merge(tensors: Mapping[str, Any], rest: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(tensors)
    for key, value in rest.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _flatten(state: Mapping[str, Any], prefix: str = "") -> dict[str, Tensor]:
    # The same "a.b.c" names DCP gives nested dict entries.
    flat: dict[str, Tensor] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


# -------------------------------------------------------------------------------------------------- saving


def sharded_record(kinds: Mapping[str, str], directory: str = SHARDED_DIR) -> dict[str, Any]:
    """The ``meta.json`` record (``extra_meta[META_KEY]``) of the sharded entries ``kinds``.

    ``directory`` is the DCP folder inside the checkpoint (``"."``: the checkpoint folder itself, as in
    the ``"dcp"`` layout).
    """
    return {"format": _FORMAT, "directory": directory, "entries": dict(kinds)}


def _tensors_and_rest(sharded: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``sharded``'s tensors (what DCP writes) and the rest (what the shared state holds), by checkpoint key."""
    tensors: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, state in sharded.items():
        tensors[key], rest[key] = _split_tensors(state)
    return tensors, rest


def write_sharded(staging: str | os.PathLike[str], sharded: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank: write the tensors of ``sharded`` (by checkpoint key) into ``staging/sharded`` with DCP.

    Returns the non-tensor parts, which belong in the shared state under `REST_KEY`.

    Example:
        ```python
        rest = write_sharded(tmp, {"model": get_model_state(fsdp_model, full=False)})
        ```
    """
    from torch.distributed.checkpoint import filesystem, state_dict_saver

    tensors, rest = _tensors_and_rest(sharded)
    state_dict_saver.save(tensors, storage_writer=filesystem.FileSystemWriter(Path(staging) / SHARDED_DIR))
    return rest


def write_sharded_async(
    staging: str | os.PathLike[str], sharded: Mapping[str, Mapping[str, Any]], process_group: Any = None
) -> Callable[[], dict[str, Any]]:
    """Every rank: stage the shards of ``sharded`` now and write them with DCP ``async_save`` in the background.

    ``process_group`` is the group the background write may use (never the training one; ``None``
    alone). Returns a function that waits for the write and gives the shared entries
    `write_sharded()` would return, staged too.

    Example:
        ```python
        finish = write_sharded_async(tmp, {"model": get_model_state(fsdp_model, full=False)}, group)
        shared.update(finish())   # in the background thread, before the commit
        ```
    """
    from torch.distributed.checkpoint import filesystem, state_dict_saver

    from fabricx.checkpoint.background import stage_to_host

    tensors, rest = _tensors_and_rest(sharded)
    staged_rest = stage_to_host(rest)  # e.g. param groups a scheduler changes in place
    future = state_dict_saver.async_save(
        tensors,
        storage_writer=filesystem.FileSystemWriter(Path(staging) / SHARDED_DIR),
        process_group=process_group,
        no_dist=process_group is None,
    )

    def finish() -> dict[str, Any]:
        cast(Any, future).result()  # a concurrent Future
        return {REST_KEY: staged_rest}

    return finish


def save_sharded(
    path: str | os.PathLike[str],
    *,
    sharded: dict[str, dict[str, Any]],
    kinds: dict[str, str],
    shared: dict[str, Any],
    per_rank: dict[str, Any],
    rank: int,
    world_size: int,
    barrier: Callable[[], Any] | None,
    token: str | None,
) -> Path:
    """Write a fabricx checkpoint whose ``sharded`` entries go to a DCP folder, every rank writing its shards.

    ``kinds`` maps each sharded key to ``"model"`` or ``"optimizer"``. Every rank must call this.

    Example:
        ```python
        save_sharded("ckpt", sharded={"model": get_model_state(m, full=False)}, kinds={"model": "model"},
                     shared={"step": 3}, per_rank={}, rank=r, world_size=w, barrier=dist.barrier, token=t)
        ```
    """
    meta = {META_KEY: sharded_record(kinds)}
    writer = CheckpointWriter(path, rank=rank, world_size=world_size, barrier=barrier, token=token, extra_meta=meta)
    with writer:  # commits, or aborts on an error
        rest = write_sharded(writer.tmp, sharded)
        writer.write_shared({**shared, REST_KEY: rest})
        writer.write_rank(per_rank)
    return writer.path


# ------------------------------------------------------------------------------------------------- loading


def sharded_info(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The sharded-entries record of a checkpoint's metadata, or ``None`` for a checkpoint without shards.

    Example:
        ```python
        sharded_info(read_meta("ckpt"))  # {"format": ..., "directory": "sharded", "entries": {"model": "model"}}
        ```
    """
    extra = meta.get("extra_meta") or {}
    info = extra.get(META_KEY) if isinstance(extra, Mapping) else None
    if info is None:
        return None
    if not isinstance(info, Mapping) or info.get("format") != _FORMAT or not isinstance(info.get("entries"), Mapping):
        raise CheckpointError(f"The checkpoint metadata's {META_KEY!r} record is damaged: {info!r:.200}.")
    info = dict(info)
    if info.get("directory") != ".":  # "." is the checkpoint folder itself
        plain_name(info.get("directory"), f"meta.json's {META_KEY!r} record")
    if not all(isinstance(k, str) and v in ("model", "optimizer") for k, v in info["entries"].items()):
        raise CheckpointError(f"The checkpoint metadata's {META_KEY!r} entries are damaged: {info['entries']!r:.200}.")
    return info


def load_sharded(
    directory: str | os.PathLike[str],
    targets: dict[str, dict[str, Any]],
    rest: Mapping[str, Any],
    kinds: Mapping[str, str],
    strict: bool = True,
) -> dict[str, dict[str, Any]]:
    """Fill ``targets`` (the live sharded state dicts, by checkpoint key) from the DCP folder; every rank calls it.

    Returns each target's state with the checkpoint's non-tensor parts (``rest``) merged in, ready for
    `set_model_state()` / `set_optimizer_state()`. Shapes are checked before reading.

    Example:
        ```python
        loaded = load_sharded("ckpt/sharded", {"model": get_model_state(m, full=False)}, rest, {"model": "model"})
        set_model_state(m, loaded["model"], full=False)
        ```
    """
    from torch.distributed.checkpoint import state_dict_loader

    directory = Path(directory)
    tensors = {key: _split_tensors(state)[0] for key, state in targets.items()}
    metadata = _safe_reader(directory).read_metadata()
    _check_against_metadata(directory, tensors, metadata, kinds, strict)
    _converting_dcp_errors(
        directory,
        lambda: state_dict_loader.load(
            tensors, storage_reader=_safe_reader(directory), planner=_safe_load_planner(not strict, directory)
        ),
    )
    return {key: _merge(tensors[key], rest.get(key, {})) for key in targets}


def read_full_entries(
    directory: str | os.PathLike[str], rest: Mapping[str, Any], kinds: Mapping[str, str]
) -> dict[str, Any]:
    """Read the listed sharded entries as full tensors in this process (no process group needed).

    Optimizer entries come back in ``torch.optim``'s indexed form.

    Example:
        ```python
        full = read_full_entries("ckpt/sharded", loaded.shared["__fabricx_sharded_rest__"], {"model": "model"})
        ```
    """
    from fabricx._compat.dcp import load_state_dict_without_process_group

    keys = set(kinds)
    state: dict[str, Any] = {}
    folder = Path(directory)
    if keys:
        _safe_reader(folder).read_metadata()  # its errors are clearer than DCP's wrapped ones
        _converting_dcp_errors(
            folder,
            lambda: load_state_dict_without_process_group(
                state, _safe_reader(folder), _safe_empty_planner(keys, folder)
            ),
        )
    full: dict[str, Any] = {}
    for key, kind in kinds.items():
        value = _merge(state.get(key, {}), rest.get(key, {}))
        full[key] = optimizer_state_by_index(value) if kind == "optimizer" else value
    return full


def dcp_contents(directory: str | os.PathLike[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """What a DCP folder holds, by top-level key: ``({key: "model" | "optimizer"}, {key: its non-tensor items})``.

    An entry with ``param_groups`` is an optimizer, any other a model. The non-tensor items (an optimizer's
    ``param_groups``, which Lightning's FSDP / ModelParallel strategies let DCP pickle) are read weights-only,
    nested as they were saved; the tensors are not read.

    Example:
        ```python
        kinds, rest = dcp_contents("lightning_ckpt")  # {"model": "model", "optimizer": "optimizer"}, {...}
        ```
    """
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    folder = Path(directory)
    metadata = _safe_reader(folder).read_metadata()
    paths = metadata.planner_data or {}
    storage = {index.fqn: info for index, info in metadata.storage_data.items() if index.offset is None}
    kinds: dict[str, str] = {}
    rest: dict[str, Any] = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        path = tuple(paths.get(fqn) or fqn.split("."))
        if len(path) < 2:
            raise CheckpointError(
                f"{folder / '.metadata'} lists {fqn!r} at the top level; a checkpoint's DCP folder holds the state "
                "dicts of modules and optimizers, each under its key."
            )
        is_optimizer = path[1] == "param_groups"
        kinds[path[0]] = "optimizer" if is_optimizer or kinds.get(path[0]) == "optimizer" else "model"
        if type(entry) is BytesStorageMetadata:
            info = storage.get(fqn)
            if info is None:
                raise CheckpointError(f"{folder / '.metadata'} is damaged: the item {fqn!r} has no stored data.")
            file = folder / info.relative_path
            with open(file, "rb") as stream:
                stream.seek(info.offset)
                data = stream.read(info.length)
            if len(data) != info.length:
                raise CheckpointError(f"{file} is truncated: item {fqn!r} is cut off.")
            _set_at(rest, path, _weights_only_item(folder, data, fqn))
    return kinds, rest


class ShardedRecord:
    """The `fabricx.checkpoint.records.StoredRecord` of DCP shards (``extra_meta["fabricx_sharded"]``)."""

    shared_keys = (REST_KEY,)  # the non-tensor parts of the sharded entries

    def entries(self, meta: Mapping[str, Any]) -> list[str]:
        info = sharded_info(meta)
        return [] if info is None else list(info["entries"])

    def read_full(self, loaded: LoadedCheckpoint, keys: list[str]) -> dict[str, Any]:
        info = sharded_info(loaded.meta)
        if info is None or not keys:
            return {}
        kinds = {key: info["entries"][key] for key in keys}
        return read_full_entries(loaded.path / info["directory"], loaded.shared.get(REST_KEY, {}), kinds)


RECORD = ShardedRecord()


def _mismatches(expected: Mapping[str, tuple], found: Mapping[str, tuple]) -> list[str]:
    return [
        f"{name}: checkpoint {tuple(found[name])}, model {tuple(shape)}"
        for name, shape in expected.items()
        if name in found and tuple(found[name]) != tuple(shape)
    ]


def _raise_on_mismatch(mismatched: list[str], where: str) -> None:
    if mismatched:
        listed = "; ".join(mismatched[:_SHOWN]) + (" ..." if len(mismatched) > _SHOWN else "")
        raise CheckpointError(
            f"Cannot load {where}: {len(mismatched)} tensor(s) have other shapes in the checkpoint than in the "
            f"objects being loaded into ({listed}). The checkpoint was saved from a differently configured "
            "model; build the model with the configuration it was saved with."
        )


def _raise_on_key_difference(expected: set[str], found: set[str], where: str) -> None:
    missing, unexpected = sorted(expected - found), sorted(found - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"Cannot load {where} strictly: missing from the checkpoint {missing[:_SHOWN]}, not in the model "
            f"{unexpected[:_SHOWN]}. Pass strict=False to load the entries both have."
        )


def _check_against_metadata(
    directory: Path, tensors: Mapping[str, Any], metadata: Any, kinds: Mapping[str, str], strict: bool
) -> None:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    saved = metadata.state_dict_metadata
    flat = _flatten(tensors)
    found = {name: tuple(md.size) for name, md in saved.items() if isinstance(md, TensorStorageMetadata)}
    expected = {name: tuple(t.shape) for name, t in flat.items()}
    _raise_on_mismatch(_mismatches(expected, found), f"the sharded checkpoint {directory}")
    if not strict:
        return
    for key in tensors:
        prefix = f"{key}."
        wanted = {name for name in expected if name.startswith(prefix)}
        have = {name for name in found if name.startswith(prefix)}
        if kinds.get(key) == "model":
            _raise_on_key_difference(wanted, have, f"{key!r} from {directory}")
        elif wanted - have:
            missing = sorted(wanted - have)
            raise CheckpointError(
                f"Cannot load {key!r} from {directory} strictly: the checkpoint lacks optimizer state "
                f"{missing[:_SHOWN]}. Pass strict=False to load what it has."
            )


# ----------------------------------------------------------------------------- reading DCP without pickle code


def _reader_class() -> type:
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        """A DCP file reader that reads metadata with `read_dcp_metadata()` (no code runs), checks it
        against the files before anything is allocated, and reads tensors only from checked byte ranges."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            directory = Path(self.path)
            metadata = read_dcp_metadata(directory)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = getattr(self, "load_id", None)
            return metadata

        def read_data(self, plan: Any, planner: Any) -> Any:
            from torch.futures import Future

            directory = Path(self.path)
            per_file: dict[str, list[Any]] = {}
            for item in plan.items:
                per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
            for name, items in per_file.items():
                file = directory / name
                with open(file, "rb") as stream:
                    for item in items:
                        _read_item(file, stream, self.storage_data[item.storage_index], item, planner)
            future: Any = Future()
            future.set_result(None)
            return future

    return SafeReader


def _read_item(file: Path, stream: Any, info: Any, item: Any, planner: Any) -> None:
    from torch.distributed.checkpoint.planner import LoadItemType

    from fabricx._compat.torch_internals import narrow_tensor_by_index

    stream.seek(info.offset)
    data = stream.read(info.length)
    if len(data) != info.length:
        raise CheckpointError(f"{file} is truncated: item {item.storage_index.fqn!r} is cut off.")
    if item.type == LoadItemType.BYTE_IO:
        planner.load_bytes(item, data)  # a fabricx planner: weights-only (see `_weights_only_item`)
        return
    tensor = _stored_tensor(file, data, item.storage_index.fqn)
    tensor = narrow_tensor_by_index(tensor, item.storage_offsets, item.lengths)
    target = planner.resolve_tensor(item).detach()
    if target.size() != tensor.size():
        raise CheckpointError(
            f"{file} is damaged: {item.storage_index.fqn!r} holds a block of shape {tuple(tensor.size())} where "
            f"the metadata promised {tuple(target.size())}."
        )
    target.copy_(tensor)
    planner.commit_tensor(item, target)


def _stored_tensor(file: Path, data: bytes, fqn: str) -> Tensor:
    """One tensor saved by DCP (a ``torch.save`` zip), through the gate: uncompressed records only, loaded
    weights-only, a plain dense tensor whose elements all have their own bytes (no stride-0 expansion)."""
    tensor = load_torch(data, f"the item {fqn!r} of {file}")
    if type(tensor) is not torch.Tensor:
        raise CheckpointError(f"{file} is damaged: the item {fqn!r} is not a dense tensor.")
    return tensor


_SAFE_READER: type | None = None


def _safe_reader(directory: Path) -> Any:
    global _SAFE_READER
    if _SAFE_READER is None:
        _SAFE_READER = _reader_class()
    if directory.is_symlink():
        raise CheckpointError(
            f"Refusing to read the sharded checkpoint folder {directory}: it is a symbolic link. A checkpoint "
            "holds its own files."
        )
    return _SAFE_READER(directory)


def _converting_dcp_errors(directory: Path, run: Callable[[], Any]) -> Any:
    """Run a DCP load; its ``CheckpointException`` (a ``BaseException``) and stray errors become ``CheckpointError``."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        return run()
    except CheckpointError:
        raise
    except CheckpointException as wrapped:
        failures = [pair[0] if isinstance(pair, tuple) else pair for pair in wrapped.failures.values()]
        for failure in failures:
            if isinstance(failure, CheckpointError):
                raise failure from None
        detail = "; ".join(f"{type(f).__name__}: {str(f)[:200]}" for f in failures[:2]) or str(wrapped)[:300]
        raise CheckpointError(f"Cannot read the sharded checkpoint {directory}: {detail}") from None
    except Exception as error:
        raise CheckpointError(
            f"Cannot read the sharded checkpoint {directory}: {type(error).__name__}: {str(error)[:300]}"
        ) from None


def _weights_only_item(file: Path, data: bytes, fqn: str) -> Any:
    """A non-tensor item DCP pickled (an optimizer's ``param_groups`` as Lightning writes them), read through the
    gate's allow-listed ``weights_only=True`` unpickler: plain values only, nothing is executed."""
    return load_torch(data, f"the item {fqn!r} of {file}")


def _set_at(root: Any, path: tuple, value: Any) -> None:
    """Put ``value`` at the key path ``path`` of ``root``, creating dicts (str keys) and lists (int keys)."""
    node = root
    for key, following in itertools.pairwise(path):
        if isinstance(node, list):
            node.extend([None] * (key + 1 - len(node)))
        child = node[key] if isinstance(node, list) else node.get(key)
        if child is None:
            child = [] if isinstance(following, int) else {}
            node[key] = child
        node = child
    if isinstance(node, list):
        node.extend([None] * (path[-1] + 1 - len(node)))
    node[path[-1]] = value


def _bytes_into_state(planner: Any, read_item: Any, data: bytes) -> None:
    fqn = read_item.dest_index.fqn
    value = _weights_only_item(planner.checkpoint_folder, data, fqn)
    path = planner.mappings.get(fqn, (fqn,)) if planner.flatten_state_dict else (fqn,)
    _set_at(planner.original_state_dict if planner.flatten_state_dict else planner.state_dict, path, value)


def _safe_load_planner(allow_partial_load: bool, folder: Path) -> Any:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafeLoadPlanner(DefaultLoadPlanner):
        checkpoint_folder = folder

        def load_bytes(self, read_item: Any, value: Any) -> None:
            _bytes_into_state(self, read_item, value)

    return SafeLoadPlanner(allow_partial_load=allow_partial_load)


def _safe_empty_planner(keys: set[str], folder: Path) -> Any:
    from fabricx._compat.dcp import empty_state_dict_planner_class

    class SafeEmptyPlanner(empty_state_dict_planner_class()):
        checkpoint_folder = folder

        def load_bytes(self, read_item: Any, value: Any) -> None:
            _bytes_into_state(self, read_item, value)

    return SafeEmptyPlanner(keys=keys)
