"""Writing model weights the way Accelerate names them: ``model.safetensors`` (sharded with
``model.safetensors.index.json``) or, without safetensors, ``pytorch_model.bin`` (sharded with
``pytorch_model.bin.index.json``)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fabricx.checkpoint.atomic import atomic_write_file
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
        atomic_write_file(f, lambda handle: handle.write(payload))
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
    _remove_old_bin_files(target)
    if len(shards) == 1:
        atomic_write_file(target / f"{_BIN_PREFIX}.bin", lambda handle: torch.save(shards[0], handle))
        return target
    weight_map: dict[str, str] = {}
    total = 0
    for index, shard in enumerate(shards, start=1):
        name = f"{_BIN_PREFIX}-{index:05d}-of-{len(shards):05d}.bin"
        atomic_write_file(target / name, lambda handle, shard=shard: torch.save(shard, handle))
        weight_map.update(dict.fromkeys(shard, name))
        total += sum(t.numel() * t.element_size() for t in shard.values() if isinstance(t, torch.Tensor))
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    payload = json.dumps(index_doc, indent=2).encode()
    atomic_write_file(target / f"{_BIN_PREFIX}.bin.index.json", lambda handle: handle.write(payload))
    return target


def _remove_old_bin_files(target: Path) -> None:
    # Shards of an earlier save with a different count would otherwise sit next to the new index.
    pattern = re.compile(rf"^{_BIN_PREFIX}(-\d{{5}}-of-\d{{5}})?\.bin(\.index\.json)?$")
    for child in target.iterdir():
        if pattern.match(child.name) and child.is_file():
            child.unlink()
