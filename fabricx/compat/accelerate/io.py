"""Writing model weights the way Accelerate names them: ``model.safetensors`` (sharded with
``model.safetensors.index.json``) or, without safetensors, ``pytorch_model.bin`` (sharded with
``pytorch_model.bin.index.json``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

from fabricx.checkpoint.atomic import atomic_write_file, fsync_tree, locked_temporary
from fabricx.checkpoint.export import parse_size, save_weights

__all__ = ["save_object", "save_state_dict"]

_BIN_PREFIX = "pytorch_model"


def save_object(obj: Any, f: str | os.PathLike[str] | Any, safe_serialization: bool = False) -> None:
    """Write ``obj`` to ``f`` (replacing it atomically): ``torch.save`` or, with ``safe_serialization``,
    a safetensors file (``obj`` must then be a dict of tensors)."""
    if safe_serialization:
        from safetensors.torch import save as safetensors_bytes

        if not isinstance(obj, Mapping):
            raise TypeError(
                f"safe_serialization=True writes a dict of tensors; got {type(obj).__name__}. "
                "Pass a state dict, or safe_serialization=False for any picklable object."
            )
        payload = safetensors_bytes({k: v.contiguous() for k, v in obj.items()}, metadata={"format": "pt"})
        if not isinstance(f, str | os.PathLike):
            f.write(payload)
            return
        atomic_write_file(f, lambda handle: _write_all(handle, payload))
        return
    if not isinstance(f, str | os.PathLike):
        torch.save(obj, f)  # a file object of the caller's
        return
    atomic_write_file(f, lambda handle: torch.save(obj, handle))


def save_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    directory: str | os.PathLike[str],
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> Path:
    """Write a state dict into ``directory`` under Accelerate's file names, sharded at ``max_shard_size``."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"save_model() needs a directory, but {target} is a file. Give a folder path.")
    if safe_serialization:
        return save_weights(state_dict, target, max_shard_size=max_shard_size, filename_prefix="model")
    return _save_bin(state_dict, target, parse_size(max_shard_size))


def _save_bin(state_dict: Mapping[str, torch.Tensor], target: Path, limit: int) -> Path:
    """Write ``pytorch_model.bin`` (or shards and an index) so that a crash or a full disk at any moment
    leaves the previous weights or the new ones loadable: write new, then switch, then delete.

    The switch is one atomic rename: of ``pytorch_model.bin`` itself, or of the index. Loaders prefer
    the single file over an index, so a sharded save removes an old single file only after its index
    is in place; old shards whose names the new ones reuse are first re-pointed to by the old index
    under other names (hard links), so the old index never lists a file of the new save.
    """
    target.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    token = secrets.token_hex(4)
    single, index_file = target / f"{_BIN_PREFIX}.bin", target / f"{_BIN_PREFIX}.bin.index.json"
    if len(shards) == 1:
        atomic_write_file(single, lambda handle: torch.save(shards[0], handle))  # the switch
        _remove_bin_files(target, keep={single.name})
        return target
    names = [f"{_BIN_PREFIX}-{i:05d}-of-{len(shards):05d}.bin" for i in range(1, len(shards) + 1)]
    staged: list[Path] = []
    handles: list[BinaryIO] = []  # held open (and locked) until renamed: a clean-up meanwhile keeps them
    try:
        for name, shard in zip(names, shards, strict=True):
            path, handle = locked_temporary(target / name)
            staged.append(path)
            handles.append(handle)
            torch.save(shard, handle)
            handle.flush()
            os.fsync(handle.fileno())
        _move_old_shards_aside(target, index_file, set(names), token)
        for name, path in zip(names, staged, strict=True):
            os.replace(path, target / name)
        fsync_tree(target)  # the shards' names are durable before the index that lists them
        weight_map = {key: name for name, shard in zip(names, shards, strict=True) for key in shard}
        total = sum(
            t.numel() * t.element_size() for shard in shards for t in shard.values() if isinstance(t, torch.Tensor)
        )
        payload = json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
        atomic_write_file(index_file, lambda handle: _write_all(handle, payload))  # the switch
    except BaseException:
        for path in staged:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    finally:
        for handle in handles:
            handle.close()
    _remove_bin_files(target, keep={index_file.name, *names})
    return target


_BIN_FILE = re.compile(rf"^{_BIN_PREFIX}(\.old-[0-9a-f]+)?(-\d{{5}}-of-\d{{5}})?\.bin(\.index\.json)?$")


def _move_old_shards_aside(target: Path, index_file: Path, new_names: set[str], token: str) -> None:
    """Make the current index list its shards under names the new save does not use (hard links, or
    copies where links are impossible), switching the index atomically, so it stays complete."""
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
        weight_map = index["weight_map"]
        used = set(weight_map.values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # no (readable) old index: nothing of it to keep loadable
    clashing = {name for name in used if isinstance(name, str) and name in new_names}
    if not clashing:
        return
    renamed = {}
    for name in sorted(clashing):
        aside = name.replace(_BIN_PREFIX, f"{_BIN_PREFIX}.old-{token}", 1)
        try:
            os.link(target / name, target / aside)
        except FileExistsError:
            pass
        except OSError:
            shutil.copy2(target / name, target / aside)
        renamed[name] = aside
    index["weight_map"] = {key: renamed.get(value, value) for key, value in weight_map.items()}
    payload = json.dumps(index, indent=2).encode()
    atomic_write_file(index_file, lambda handle: _write_all(handle, payload))


def _remove_bin_files(target: Path, keep: set[str]) -> None:
    """Delete the weight files of earlier saves (the index first, so no index lists a deleted shard)."""
    stale = [c for c in target.iterdir() if _BIN_FILE.match(c.name) and c.name not in keep and c.is_file()]
    for child in sorted(stale, key=lambda c: not c.name.endswith(".index.json")):
        with contextlib.suppress(FileNotFoundError):
            child.unlink()


def _write_all(handle: BinaryIO, payload: bytes) -> None:
    handle.write(payload)
