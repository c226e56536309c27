"""Export model weights as safetensors, sharded by size, with tied weights stored once.

Layout, for ``filename_prefix="model"``:

```text
model.safetensors                                when everything fits in one shard, else
model-00001-of-00003.safetensors ...             and
model.safetensors.index.json   {"metadata": {"total_size": bytes, "aliases": {alias: canonical}},
                                "weight_map": {every name incl. aliases: shard file}}
```

Tied weights (two names for one tensor) are written once under the first name; the other name is
recorded as an alias (in the index, or in the single file's metadata) and loads as the same tensor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from fabricx.checkpoint.atomic import atomic_directory, resolve_directory
from fabricx.checkpoint.file_mode import new_file_mode
from fabricx.checkpoint.serialization import SAFETENSORS_DTYPES
from fabricx.utilities.exceptions import CheckpointError

__all__ = ["load_weights", "load_weights_into", "parse_size", "save_weights"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_ALIASES_KEY = "fabricx_aliases"


def parse_size(size: int | str) -> int:
    """Turn ``"5GB"`` (powers of 1000), ``"5GiB"`` (powers of 1024) or a byte count into bytes.

    Example:
        ```python
        parse_size("5GB")    # 5_000_000_000
        parse_size("2MiB")   # 2_097_152
        ```
    """
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    elif isinstance(size, str) and (match := _SIZE_PATTERN.match(size)) and match.group(2).lower() in _UNITS:
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    else:
        raise ValueError(
            f"Cannot read {size!r} as a size. Give a number of bytes (int) or a string like '500MB', '5GB' "
            "(KB/MB/GB/TB = powers of 1000) or '4GiB' (KiB/MiB/GiB/TiB = powers of 1024)."
        )
    if value < 1:
        raise ValueError(f"A size must be at least 1 byte; got {size!r}.")
    return value


def _shard_name(prefix: str, index: int, count: int) -> str:
    return f"{prefix}-{index:05d}-of-{count:05d}.safetensors"


def _is_ours(name: str, prefix: str) -> bool:
    if name in (f"{prefix}.safetensors", f"{prefix}.safetensors.index.json"):
        return True
    return re.fullmatch(rf"{re.escape(prefix)}-\d{{5}}-of-\d{{5}}\.safetensors", name) is not None


def _check_prefix(prefix: str) -> None:
    if not prefix or any(sep in prefix for sep in ("/", "\\", os.sep)) or prefix.startswith("."):
        raise ValueError(f"filename_prefix must be a plain file name such as 'model'; got {prefix!r}.")


def _collect(state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Unique tensors (CPU, contiguous, memory not shared) by name, and alias -> canonical name."""
    canonical: dict[tuple, str] = {}
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    storage_users: dict[tuple, int] = {}
    for name, value in state.items():
        if not isinstance(name, str):
            raise CheckpointError(f"Weight names must be str; got {name!r} ({type(name).__name__}).")
        if not isinstance(value, torch.Tensor) or type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise CheckpointError(
                f"Cannot export {name!r}: it is a {type(value).__qualname__}, not a plain torch.Tensor. "
                "Export only tensors (for a sharded model, gather a full state dict first)."
            )
        if value.device.type == "meta" or value.layout != torch.strided:
            raise CheckpointError(
                f"Cannot export {name!r}: a {value.layout} tensor on {value.device} has no dense data."
            )
        if value.dtype not in SAFETENSORS_DTYPES:
            raise CheckpointError(
                f"Cannot export {name!r}: safetensors cannot store dtype {value.dtype}. "
                "Convert it first (e.g. `.float()`)."
            )
        storage = value.untyped_storage()
        if storage.nbytes() == 0:
            unique[name] = value.detach().to("cpu").contiguous()
            continue
        memory = (str(value.device), storage.data_ptr())
        view = (*memory, value.dtype, tuple(value.shape), value.stride(), value.storage_offset())
        if view in canonical:
            aliases[name] = canonical[view]
            continue
        canonical[view] = name
        storage_users[memory] = storage_users.get(memory, 0) + 1
        unique[name] = value
    for name, value in unique.items():
        tensor = value.detach().to("cpu").contiguous()
        memory = (str(value.device), value.untyped_storage().data_ptr())
        # Different views of one buffer cannot share memory in safetensors: give each its own copy.
        if value.untyped_storage().nbytes() and storage_users.get(memory, 0) > 1:
            tensor = tensor.clone()
        unique[name] = tensor
    return unique, aliases


def _plan_shards(tensors: dict[str, torch.Tensor], limit: int) -> list[list[str]]:
    shards: list[list[str]] = []
    current: list[str] = []
    current_size = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        if current and current_size + size > limit:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards or [[]]


def _link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    if os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _carry_over(old: Path, new: Path, keep: Callable[[str], bool]) -> None:
    # The directory is replaced as a whole; files that are not ours (a config, a tokenizer) come along.
    for child in old.iterdir():
        if not keep(child.name):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.copytree(child, new / child.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(child, new / child.name)


def save_weights(
    state_dict_or_module: Mapping[str, torch.Tensor] | torch.nn.Module,
    directory: str | os.PathLike[str],
    max_shard_size: int | str = "10GB",
    filename_prefix: str = "model",
) -> Path:
    """Write a model's weights as safetensors into ``directory``, sharded at ``max_shard_size``.

    The directory is replaced atomically; earlier weight files with the same prefix are dropped and
    other files in it are kept. A tensor larger than the limit gets a shard of its own.

    Example:
        ```python
        save_weights(model, "export/", max_shard_size="2GB")
        model.load_state_dict(load_weights("export/"))
        ```
    """
    _check_prefix(filename_prefix)
    limit = parse_size(max_shard_size)
    if isinstance(state_dict_or_module, torch.nn.Module):
        state = state_dict_or_module.state_dict()
    elif isinstance(state_dict_or_module, Mapping):
        state = state_dict_or_module
    else:
        raise CheckpointError(
            f"save_weights takes an nn.Module or a state dict; got {type(state_dict_or_module).__qualname__}."
        )
    tensors, aliases = _collect(state)
    shards = _plan_shards(tensors, limit)
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise CheckpointError(f"Cannot export weights to {target}: it exists and is not a directory.")
    # After a crash in the middle of the previous save's swap, its complete copy is a `.old-*` sibling.
    previous = target if target.is_dir() else resolve_directory(target)
    with atomic_directory(target) as tmp:
        if previous is not None and previous.is_dir():
            _carry_over(previous, tmp, lambda name: not _is_ours(name, filename_prefix))
        if len(shards) == 1:
            metadata = {"format": "pt"}
            if aliases:
                metadata[_ALIASES_KEY] = json.dumps(aliases)
            weights_file = tmp / f"{filename_prefix}.safetensors"
            save_file({n: tensors[n] for n in shards[0]}, str(weights_file), metadata)
            _give_the_umask_mode([weights_file], tmp)
            return target
        weight_map: dict[str, str] = {}
        shard_files: list[Path] = []
        for index, names in enumerate(shards, start=1):
            file_name = _shard_name(filename_prefix, index, len(shards))
            save_file({n: tensors[n] for n in names}, str(tmp / file_name), {"format": "pt"})
            weight_map.update(dict.fromkeys(names, file_name))
            shard_files.append(tmp / file_name)
        _give_the_umask_mode(shard_files, tmp)
        for alias, name in aliases.items():
            weight_map[alias] = weight_map[name]
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index_doc = {"metadata": {"total_size": total, "aliases": aliases}, "weight_map": weight_map}
        (tmp / f"{filename_prefix}.safetensors.index.json").write_text(json.dumps(index_doc, indent=2))
    return target


def _give_the_umask_mode(weights_files: list[Path], directory: Path) -> None:
    # safetensors creates its files 0600 whatever the umask; the index JSON gets the umask's mode: one mode for all.
    mode = new_file_mode(directory)
    for weights_file in weights_files:
        os.chmod(weights_file, mode)


# ---------------------------------------------------------------------------------------------- loading


def _read_file(file: Path, names: list[str] | None = None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    try:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            stored = list(handle.keys())
            wanted = stored if names is None else names
            missing = sorted(set(wanted) - set(stored))
            if missing:
                raise CheckpointError(f"{file} does not contain {missing[:5]} listed in the index.")
            tensors = {n: handle.get_tensor(n) for n in wanted}
            metadata = handle.metadata() or {}
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"Weight file {file} is missing.") from None
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"Cannot read weights from {file} (truncated or damaged?): {error}") from None
    aliases: dict[str, str] = {}
    if names is None and _ALIASES_KEY in metadata:
        aliases = _parse_aliases(_loads(metadata[_ALIASES_KEY], file), file)
    return tensors, aliases


def _loads(text: str, source: Path) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise CheckpointError(f"{source} holds invalid JSON (truncated or damaged?): {error}") from None


def _parse_aliases(value: Any, source: Path) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise CheckpointError(f"{source} is damaged: aliases must map names to names.")
    return value


def _attach_aliases(tensors: dict[str, torch.Tensor], aliases: dict[str, str], source: Path) -> dict[str, torch.Tensor]:
    for alias, name in aliases.items():
        if name not in tensors:
            raise CheckpointError(f"{source} is damaged: alias {alias!r} points to {name!r}, which is not stored.")
        tensors[alias] = tensors[name]
    return tensors


def _read_index(index_file: Path) -> dict[str, torch.Tensor]:
    try:
        text = index_file.read_text(encoding="utf-8")
    except (OSError, ValueError) as error:
        raise CheckpointError(f"Cannot read {index_file}: {error}") from None
    index = _loads(text, index_file)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CheckpointError(f"{index_file} is damaged: it needs a 'weight_map' of tensor name -> shard file.")
    metadata = index.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{index_file} is damaged: 'metadata' is not an object.")
    aliases = _parse_aliases(metadata.get("aliases") or {}, index_file)
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if name in aliases:
            continue
        if Path(shard).name != shard or shard in (".", ".."):
            raise CheckpointError(f"{index_file} is damaged: shard {shard!r} is not a plain file name.")
        by_shard.setdefault(shard, []).append(name)
    tensors: dict[str, torch.Tensor] = {}
    for shard, names in by_shard.items():
        tensors.update(_read_file(index_file.parent / shard, names)[0])
    _attach_aliases(tensors, aliases, index_file)
    return {name: tensors[name] for name in weight_map if name in tensors}


def load_weights(directory_or_file: str | os.PathLike[str], filename_prefix: str = "model") -> dict[str, torch.Tensor]:
    """Load exported weights (a directory from `save_weights()`, or one ``.safetensors`` file) on CPU.

    Tied names come back as the very same tensor object.

    Example:
        ```python
        state = load_weights("export/")
        ```
    """
    _check_prefix(filename_prefix)
    source = Path(directory_or_file)
    if not source.exists():
        # A crash between the two renames of a save leaves the previous, complete export as `.old-*`.
        source = resolve_directory(source) or source
    if source.is_file():
        if source.name.endswith(".index.json"):
            return _read_index(source)
        tensors, aliases = _read_file(source)
        return _attach_aliases(tensors, aliases, source)
    if not source.is_dir():
        raise CheckpointError(f"No exported weights at {source}: it does not exist.")
    index_file = source / f"{filename_prefix}.safetensors.index.json"
    if index_file.is_file():
        return _read_index(index_file)
    single = source / f"{filename_prefix}.safetensors"
    if single.is_file():
        tensors, aliases = _read_file(single)
        return _attach_aliases(tensors, aliases, single)
    found = sorted(p.name for p in source.glob("*.safetensors*"))
    raise CheckpointError(
        f"No exported weights in {source}: expected {single.name} or {index_file.name}"
        + (f"; found {found} (pass filename_prefix=... to pick them)." if found else ".")
    )


def load_weights_into(
    module: torch.nn.Module, path: str | os.PathLike[str], strict: bool = True, filename_prefix: str = "model"
) -> Any:
    """Load exported weights into ``module``; returns missing/unexpected keys like ``load_state_dict``.

    Example:
        ```python
        result = load_weights_into(model, "export/", strict=False)
        print(result.missing_keys, result.unexpected_keys)
        ```
    """
    return module.load_state_dict(load_weights(path, filename_prefix), strict=strict)
