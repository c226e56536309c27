"""Turning the DeepSpeed part of a fabricx checkpoint into full fp32 state dicts (no process group needed).

A checkpoint saved under the DeepSpeed strategy holds, next to fabricx's own files, a folder
``deepspeed/<key>/`` per model (``<key>`` is the model's key in the saved state) written by
``engine.save_checkpoint``. ZeRO stages 1-3 keep the fp32 master weights sharded in the optimizer
files; DeepSpeed's ``zero_to_fp32`` merges them. Stage 0 stores the full module.

DeepSpeed's files are ``torch.save`` pickles; they are read with ``weights_only=True`` and only
DeepSpeed's own checkpoint types allowed (see `fabricx.checkpoint.deepspeed_files`), so reading
them never runs code. ``allow_pickle=True`` opts into full unpickling for trusted foreign files.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fabricx.checkpoint.deepspeed_files import check_engine_folder, load_engine_file, safe_engine_loading
from fabricx.checkpoint.safe_read import plain_name
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.loaded import LoadedCheckpoint

#: Folder inside a fabricx checkpoint directory that holds the engines' own checkpoint files.
ENGINE_FOLDER = "deepspeed"
#: Key of ``meta.json``'s ``extra_meta`` that lists the models saved by their engines.
META_KEY = "deepspeed"


def deepspeed_model_states(
    directory: str | os.PathLike[str], keys: Iterable[str] | None = None, *, allow_pickle: bool = False
) -> dict[str, dict[str, Tensor]]:
    """Every DeepSpeed model in a fabricx checkpoint (or those named by ``keys``) as
    ``{state key: full fp32 state dict}``.

    Example:
        ```python
        states = deepspeed_model_states("runs/ckpt_10")   # {"model": {"0.weight": ..., ...}}
        plain_model.load_state_dict(states["model"])
        ```
    """
    root = Path(directory)
    engine_dir = root / ENGINE_FOLDER
    if engine_dir.is_symlink() or not engine_dir.is_dir():
        raise CheckpointError(
            f"{root} holds no {ENGINE_FOLDER}/ folder, so it was not saved by the DeepSpeed strategy."
        )
    tags = _model_tags(root, engine_dir) if keys is None else list(keys)
    if not tags:
        raise CheckpointError(f"{engine_dir} holds no DeepSpeed engine checkpoint (no <key>/ folders).")
    for tag in tags:
        plain_name(tag, f"{root / 'meta.json'} (DeepSpeed model tag)")
    return {tag: _consolidate_tag(engine_dir, tag, allow_pickle) for tag in tags}


def consolidate_deepspeed_checkpoint(
    directory: str | os.PathLike[str], *, allow_pickle: bool = False
) -> dict[str, Tensor]:
    """The weights of a DeepSpeed checkpoint as one fp32 state dict that loads into a plain model.

    With one model its keys are the model's own; with several (a GAN) each key is prefixed by the
    model's state key, e.g. ``"generator.0.weight"``.

    Example:
        ```python
        model.load_state_dict(consolidate_deepspeed_checkpoint("runs/ckpt_10"))
        ```
    """
    states = deepspeed_model_states(directory, allow_pickle=allow_pickle)
    if len(states) == 1:
        return next(iter(states.values()))
    return {f"{tag}.{name}": tensor for tag, state in states.items() for name, tensor in state.items()}


def _model_tags(root: Path, engine_dir: Path) -> list[str]:
    meta_file = root / "meta.json"
    if meta_file.is_file():
        from fabricx.checkpoint.format import read_meta

        extra = read_meta(root).get("extra_meta") or {}
        record = extra.get(META_KEY) if isinstance(extra, dict) else None
        models = record.get("models") if isinstance(record, dict) else None
        if models:
            if not isinstance(models, (dict, list)):
                raise CheckpointError(f"{meta_file} is damaged: its DeepSpeed models record is {models!r:.100}.")
            return list(models)
    return sorted(entry.name for entry in engine_dir.iterdir() if entry.is_dir() and not entry.is_symlink())


def _consolidate_tag(engine_dir: Path, tag: str, allow_pickle: bool) -> dict[str, Tensor]:
    tag_dir = check_engine_folder(engine_dir / tag)
    if any(tag_dir.glob("*optim_states.pt")):
        with _deepspeed_import_quiet():
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        # zero_to_fp32 reports its progress with print() and tqdm bars (on stderr); keep the caller's output clean.
        quiet = contextlib.ExitStack()
        quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
        quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
        with quiet, safe_engine_loading(allow_pickle=allow_pickle):
            try:
                state = get_fp32_state_dict_from_zero_checkpoint(os.fspath(engine_dir), tag=tag)
            except CheckpointError:
                raise
            except Exception as error:
                raise CheckpointError(
                    f"Cannot consolidate the DeepSpeed checkpoint {tag_dir}: {type(error).__name__}: {str(error)[:300]}"
                ) from None
        if state is None:
            raise CheckpointError(f"DeepSpeed's zero_to_fp32 found no weights in {tag_dir}.")
        return dict(state)
    return _stage0_module_state(tag_dir, allow_pickle)


@contextlib.contextmanager
def _deepspeed_import_quiet() -> Iterator[None]:
    """DeepSpeed's first import logs "Setting accelerator to CPU" on a machine without a GPU; reading weights
    needs no accelerator, so that line says nothing to someone consolidating a checkpoint."""
    if "deepspeed" in sys.modules:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _stage0_module_state(tag_dir: Path, allow_pickle: bool) -> dict[str, Tensor]:
    files = sorted(tag_dir.glob("mp_rank_*_model_states.pt"))
    if not files:
        raise CheckpointError(f"{tag_dir} holds neither ZeRO optimizer shards nor a model states file.")
    checkpoint: Any = load_engine_file(files[0], allow_pickle=allow_pickle)
    module = checkpoint.get("module") if isinstance(checkpoint, dict) else None
    if not isinstance(module, dict):
        raise CheckpointError(f"{files[0]} has no 'module' state dict.")
    if not all(isinstance(name, str) and isinstance(t, Tensor) for name, t in module.items()):
        raise CheckpointError(f"{files[0]} is damaged: its 'module' entry is not a state dict of tensors.")
    return {name: tensor.float() if torch.is_floating_point(tensor) else tensor for name, tensor in module.items()}


def engine_location(meta: Mapping[str, Any], key: str) -> tuple[str, str]:
    """``(folder, tag)`` of the engine files of the model ``key``: ``folder`` relative to the checkpoint
    (``"."``: the checkpoint folder itself, as in the ``"deepspeed"`` layout), ``tag`` the engine's tag folder
    in it. Without a location in the record, fabricx's directory layout: ``deepspeed/<key>/``.

    Example:
        ```python
        engine_location(read_meta("ckpt"), "model")  # ("deepspeed", "model")
        ```
    """
    record = (meta.get("extra_meta") or {}).get(META_KEY) or {}
    models = record.get("models") if isinstance(record, Mapping) else None
    entry = models.get(key) if isinstance(models, Mapping) else None
    folder = record.get("folder", ENGINE_FOLDER) if isinstance(record, Mapping) else ENGINE_FOLDER
    tag = entry.get("tag", key) if isinstance(entry, Mapping) else key
    if folder != ".":
        plain_name(folder, "The checkpoint's DeepSpeed record (engine folder)")
    return folder, plain_name(tag, "The checkpoint's DeepSpeed record (model tag)")


def engine_model_states(
    root: str | os.PathLike[str], meta: Mapping[str, Any], keys: Iterable[str], *, allow_pickle: bool = False
) -> dict[str, dict[str, Tensor]]:
    """``{state key: full fp32 state dict}`` of the DeepSpeed models ``keys`` of the checkpoint at ``root``,
    wherever its record says their engine files are (`engine_location()`).

    Example:
        ```python
        engine_model_states("lightning_ckpt", loaded.meta, ["model"])  # {"model": {"0.weight": ...}}
        ```
    """
    states = {}
    for key in keys:
        plain_name(key, "The checkpoint's DeepSpeed record (model key)")
        folder, tag = engine_location(meta, key)
        engine_dir = Path(root) if folder == "." else Path(root) / folder
        if engine_dir.is_symlink() or not engine_dir.is_dir():
            raise CheckpointError(f"{root} holds no {folder}/ folder of DeepSpeed engine files.")
        states[key] = _consolidate_tag(engine_dir, tag, allow_pickle)
    return states


def saved_engines(meta: Mapping[str, Any]) -> dict[str, str | None]:
    """``{model key: its optimizer's key or None}`` of the DeepSpeed record in a checkpoint's metadata.

    Example:
        ```python
        saved_engines(read_meta("ckpt"))  # {"model": "optimizer"}
        ```
    """
    extra = meta.get("extra_meta") or {}
    record = extra.get(META_KEY) if isinstance(extra, Mapping) else None
    if record is None:
        return {}
    models = record.get("models") if isinstance(record, Mapping) else None
    if isinstance(models, list):  # model keys alone: no optimizer stored with them
        return dict.fromkeys(models)
    if not isinstance(models, Mapping):
        raise CheckpointError(f"The checkpoint metadata's {META_KEY!r} record is damaged: {record!r:.200}.")
    engines: dict[str, str | None] = {}
    for key, entry in models.items():
        optimizer = entry.get("optimizer") if isinstance(entry, Mapping) else None
        engines[key] = optimizer if isinstance(optimizer, str) else None
    return engines


class EngineRecord:
    """The `fabricx.checkpoint.records.StoredRecord` of DeepSpeed engine files (``extra_meta["deepspeed"]``).

    An engine's optimizer lives in its model's files and has no full form: `read_full()` leaves it out.
    """

    shared_keys: tuple[str, ...] = ()

    def entries(self, meta: Mapping[str, Any]) -> list[str]:
        engines = saved_engines(meta)
        return [*engines, *(optimizer for optimizer in engines.values() if optimizer is not None)]

    def read_full(self, loaded: LoadedCheckpoint, keys: list[str]) -> dict[str, Any]:
        models = [key for key in keys if key in saved_engines(loaded.meta)]
        return dict(engine_model_states(loaded.path, loaded.meta, models))


RECORD = EngineRecord()


__all__ = [
    "ENGINE_FOLDER",
    "META_KEY",
    "RECORD",
    "EngineRecord",
    "consolidate_deepspeed_checkpoint",
    "deepspeed_model_states",
    "engine_location",
    "engine_model_states",
    "saved_engines",
]
