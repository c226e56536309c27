"""The ``"deepspeed"`` layout: a checkpoint as Lightning Fabric's DeepSpeedStrategy writes one.

    <path>/checkpoint/mp_rank_00_model_states.pt
        the engine's model state, plus the client state
    <path>/checkpoint/zero_pp_rank_<r>_mp_rank_00_*.pt
        ZeRO shards (optimizer; ZeRO-3: model states too)
    <path>/latest
        the tag, ``checkpoint``

The files are the DeepSpeed engine's own ``save_checkpoint(path, client_state=..., tag="checkpoint")``
(the strategy's `fabricx.checkpoint.contents.EntryStorage.save_engine_folder`), for the state's one
DeepSpeed model and its optimizer. Everything else of the state is the client state, which the engine
stores in its model states file: rank 0's is a single-file checkpoint's contents
(`fabricx.checkpoint.torch_files.file_contents`: the user's entries at the top, every rank's
per-rank ones, fabricx's own under reserved keys, among them the engine record `RECORD_KEY` that names
the model's and optimizer's keys). Lightning's ``fabric.load`` restores such a folder and returns
fabricx's entries as unrequested ones; fabricx loads a folder Lightning wrote, taking the state's
DeepSpeed model (and optimizer) for the engine's, whatever their keys.

Reading never runs code: the model states file is read weights-only with DeepSpeed's own types
allowed (`fabricx.checkpoint.deepspeed_files`), and the engine's own load goes through the same reader.
A folder holds this layout when its ``checkpoint/`` folder has a model states file and it has no fabricx
``meta.json``.

A save is atomic (`fabricx.checkpoint.staged_folder`): the engine writes into a staging folder
beside ``<path>``, which rank 0 swaps into place once every rank wrote its files; a save that dies
midway leaves the previous checkpoint. With ``async_save=True`` the engine's files are written before
the save returns, the commit in the background.

Example:

```python
fabric = Fabric(strategy=DeepSpeedStrategy(stage=2), ...)
state = {"model": model, "optimizer": optimizer, "step": 10}
fabric.save("ckpt/step_10", state, layout="deepspeed")
# or a folder Lightning's DeepSpeedStrategy wrote
fabric.load("ckpt/step_10", state)
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.contents import (
    claimed_entries,
    entry_storage_of,
    reserved_key,
    unwrap_object,
)
from fabricx.checkpoint.deepspeed_consolidate import META_KEY
from fabricx.checkpoint.deepspeed_files import check_engine_folder, load_engine_file
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.staged_folder import FABRICX_META, StagedFolderLayout
from fabricx.checkpoint.torch_files import file_contents, split_contents
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["ENGINE_STATE_KEYS", "LATEST_FILE", "LAYOUT", "RECORD_KEY", "TAG", "DeepSpeedLayout", "read_deepspeed"]

#: The engine's tag folder, as Lightning's DeepSpeedStrategy names it.
TAG = "checkpoint"
#: The file naming the newest tag, which DeepSpeed writes beside the tag folder.
LATEST_FILE = "latest"
#: The client-state entry holding the engine record (which keys the model and optimizer had).
RECORD_KEY = reserved_key("deepspeed")
#: What the engine stores beside the client state in a model states file (DeepSpeed's
#: ``_common_checkpoint_state``); a state key among these would be overwritten, so a save refuses it.
ENGINE_STATE_KEYS = frozenset(
    {
        "module",
        "buffer_names",
        "optimizer",
        "param_shapes",
        "frozen_param_shapes",
        "shared_params",
        "frozen_param_fragments",
        "lr_scheduler",
        "data_sampler",
        "random_ltd",
        "sparse_tensor_module_names",
        "skipped_steps",
        "global_steps",
        "global_samples",
        "dp_world_size",
        "mp_world_size",
        "ds_config",
        "ds_version",
        "checkpoint_parallel_dimensions",
        "universal_checkpoint_info",
    }
)
#: The model's and optimizer's keys assumed for a folder that does not name them (Lightning's), until
#: `DeepSpeedLayout.match_state` finds them in the state loaded into.
_ROLE_MODEL, _ROLE_OPTIMIZER = "model", "optimizer"
_MODEL_FILES = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")
#: What DeepSpeed writes at the top of its folder (the last two: its recovery scripts).
_OWN_NAMES = frozenset({TAG, LATEST_FILE, "zero_to_fp32.py", "zero_to_torch.py"})


def _engine_record(request: SaveRequest) -> tuple[dict[str, Any], Any]:
    """(the state's engine entries, its storage), checked before anything is written."""
    host = request.host
    storage = entry_storage_of(host)
    if storage is None or storage.engine_folder_layout != "deepspeed":
        raise CheckpointError(
            f"layout='deepspeed' writes a DeepSpeed engine's own checkpoint files; {type(host).__name__} has no "
            "DeepSpeed engine. Save with DeepSpeedStrategy, or without layout= (or layout='dcp' for shards)."
        )
    claimed = claimed_entries(storage, request.state)
    if not any(isinstance(unwrap_object(obj), Module) for obj in claimed.values()):
        raise CheckpointError(
            "Could not find a DeepSpeed model in the state to save with layout='deepspeed'; put the model set up by "
            "fabric.setup() in it: fabric.save(path, {'model': model, 'optimizer': optimizer, ...})."
        )
    storage.check_filter(list(claimed), dict(request.filter) if request.filter else None)
    return claimed, storage


def _client_state(request: SaveRequest, path: Path, others: dict[str, Any], record: Any) -> dict[str, Any]:
    """This rank's client state: on rank 0 a single file's contents (every rank's per-rank entries), on the
    others their own view (what Lightning stores in a ZeRO-3 rank's own model states file)."""
    clash = sorted(key for key in others if key in ENGINE_STATE_KEYS)
    if clash:
        raise CheckpointError(
            f"Cannot save {clash} with layout='deepspeed': DeepSpeed stores its own engine state under those keys "
            "in the same file, so they would not come back. Rename those entries."
        )
    shared, per_rank = request.split(others)
    shared[RECORD_KEY] = record
    contents = file_contents(request.host, path / TAG, shared, per_rank, rank_view=True)
    assert contents is not None  # rank_view: every rank gets its own
    return contents


def _model_file(tag_dir: Path) -> Path:
    for name in _MODEL_FILES:
        if (tag_dir / name).is_file():
            return tag_dir / name
    raise CheckpointError(f"{tag_dir} holds no DeepSpeed model states file ({' or '.join(_MODEL_FILES)}).")


def _foreign_record(tag_dir: Path, engine_state: Mapping[str, Any]) -> dict[str, Any]:
    """The engine record of a folder that names no keys (Lightning's): the model and optimizer by their roles."""
    config = engine_state.get("ds_config")
    zero = config.get("zero_optimization") if isinstance(config, Mapping) else None
    zero = zero if isinstance(zero, Mapping) else {}
    stage = zero.get("stage", 0)
    stage = stage if isinstance(stage, int) and not isinstance(stage, bool) else 0
    has_optimizer = engine_state.get("optimizer") is not None or any(tag_dir.glob("*optim_states.pt"))
    return {
        "zero_stage": stage,
        "elastic_checkpoint": stage in (1, 2) and zero.get("elastic_checkpoint") is True,
        "folder": ".",
        "models": {_ROLE_MODEL: {"optimizer": _ROLE_OPTIMIZER if has_optimizer else None, "tag": TAG}},
        "named_by_role": True,
    }


def _saved_world_size(file: Path, engine_state: Mapping[str, Any]) -> int:
    sizes = [engine_state.get(key, 1) for key in ("dp_world_size", "mp_world_size")]
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in sizes):
        raise CheckpointError(f"{file} is damaged: its world sizes are {sizes!r}, expected ints >= 1.")
    return sizes[0] * sizes[1]


def read_deepspeed(folder: Path, rank: int) -> LoadedCheckpoint:
    """Rank ``rank``'s view of a ``"deepspeed"`` folder (fabricx's or Lightning's), without running code.

    The engine's entries are described by a ``deepspeed`` record whose engine folder is the checkpoint
    itself (tag ``checkpoint``), so the DeepSpeed strategy restores them through its engine and any other
    reads the model in full.

    Example:

    ```python
    loaded = read_deepspeed(Path("lightning_ckpt"), rank=0)
    # {"model": {"optimizer": "optimizer", "tag": "checkpoint"}}
    loaded.meta["extra_meta"]["deepspeed"]["models"]
    ```
    """
    tag_dir = check_engine_folder(folder / TAG)
    file = _model_file(tag_dir)
    contents = load_engine_file(file)
    if not isinstance(contents, dict):
        raise CheckpointError(f"{file} holds a {type(contents).__name__}; a DeepSpeed model states file holds a dict.")
    engine_state = {key: contents.pop(key) for key in ENGINE_STATE_KEYS if key in contents}
    record = contents.pop(RECORD_KEY, None)
    shared, per_rank, file_meta = split_contents(file, contents, rank)
    if record is None:
        record, world_size = _foreign_record(tag_dir, engine_state), _saved_world_size(file, engine_state)
    elif isinstance(record, dict) and isinstance(record.get("models"), dict):
        world_size = file_meta["world_size"]
    else:
        raise CheckpointError(f"{file} is damaged: its {RECORD_KEY!r} entry is {record!r:.200}.")
    meta = {"world_size": world_size, "layout": "deepspeed", "extra_meta": {META_KEY: record}}
    return LoadedCheckpoint(shared=shared, per_rank=per_rank, meta=meta, path=folder)


def _live_key(candidates: Mapping[str, Any], kind: type, role: str) -> str:
    found = [key for key, obj in candidates.items() if isinstance(unwrap_object(obj), kind)]
    return found[0] if len(found) == 1 else role


class DeepSpeedLayout(StagedFolderLayout):
    """The `fabricx.checkpoint.layouts.Layout` of DeepSpeed engine checkpoint folders (Lightning's layout)."""

    key = "deepspeed"

    def is_layout(self, folder: Path) -> bool:
        tag = folder / TAG
        if (folder / FABRICX_META).exists() or not tag.is_dir():
            return False
        return any((tag / name).is_file() for name in _MODEL_FILES)

    def own_names(self, names: list[str]) -> bool:
        """A DeepSpeed checkpoint's files, or what a crashed save left."""
        return set(names) <= _OWN_NAMES

    def read_folder(self, folder: Path, rank: int) -> LoadedCheckpoint:
        return read_deepspeed(folder, rank)

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: write the state at the path as the DeepSpeed engine's own checkpoint folder, atomically;
        the handle of an async save.

        Example:

        ```python
        state = {"model": model, "optimizer": optimizer, "step": 3}
        LAYOUT.save(SaveRequest(fabric.strategy, "ckpt", state, None, mode))
        ```
        """
        folder = self.local_folder(request.path)
        claimed, storage = _engine_record(request)
        record = storage.record(claimed)
        models = dict(record.get("models") or {})
        if len(models) != 1:
            raise CheckpointError(
                f"layout='deepspeed' saves one DeepSpeed model per checkpoint, as Lightning's DeepSpeedStrategy does; "
                f"the state holds {sorted(models)}. Save each model to its own path, or save without layout= for a "
                "checkpoint directory that holds them all."
            )
        # The engine writes rigid ZeRO shards in this layout (see `save_engine_folder`), as Lightning's config does.
        record = {
            **record,
            "elastic_checkpoint": False,
            "folder": ".",
            "models": {k: {**v, "tag": TAG} for k, v in models.items()},
        }
        others = {key: obj for key, obj in request.state.items() if key not in claimed}
        client = _client_state(request, folder, others, record)

        def write_engine_files(staging: Path) -> None:  # every rank: the engine's own files
            storage.save_engine_folder(staging, claimed, client, TAG)

        return self.save_staged(request, write_engine_files, None)

    def match_state(self, loaded: LoadedCheckpoint, host: CheckpointHost, state: dict[str, Any]) -> None:
        """A folder that names no keys (Lightning's) holds the state's DeepSpeed model and its optimizer:
        the record takes their keys (the entries the strategy claims, else the state's one model and one
        optimizer), as Lightning's load finds the engine whatever its key."""
        record = loaded.meta["extra_meta"][META_KEY]
        if not record.pop("named_by_role", False):
            return
        claimed = claimed_entries(entry_storage_of(host), state)
        candidates = claimed or state
        entry = dict(record["models"][_ROLE_MODEL])
        if entry.get("optimizer") is not None:
            entry["optimizer"] = _live_key(candidates, Optimizer, _ROLE_OPTIMIZER)
        record["models"] = {_live_key(candidates, Module, _ROLE_MODEL): entry}


LAYOUT = DeepSpeedLayout()
