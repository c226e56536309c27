"""Turn a sharded checkpoint into one whose shared state holds full tensors (no process group needed)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from fabricx.checkpoint.fabric_state import read_full, stored_entries
from fabricx.checkpoint.format import CheckpointWriter, read_checkpoint
from fabricx.checkpoint.records import record_shared_keys, records_in
from fabricx.checkpoint.safe_read import regular_file
from fabricx.checkpoint.unsafe_pickle import allow_unsafe_pickle
from fabricx.utilities.exceptions import CheckpointError

__all__ = ["consolidate_checkpoint", "default_output"]

_SUFFIX = ".consolidated"
_RANK_FILE = re.compile(r"rank_([1-9][0-9]{0,8})\.(json|safetensors)")


def default_output(path: str | os.PathLike[str]) -> Path:
    """Where `consolidate_checkpoint()` writes when no output is given: ``<path>.consolidated``.

    Example:
        ```python
        default_output("runs/checkpoint_3")  # Path("runs/checkpoint_3.consolidated")
        ```
    """
    source = Path(path)
    return source.with_name(source.name + _SUFFIX)


def consolidate_checkpoint(
    path: str | os.PathLike[str], output: str | os.PathLike[str] | None = None, *, allow_pickle: bool = False
) -> Path:
    """Read every shard of a sharded (FSDP / model-parallel) checkpoint in this process and write a
    normal fabricx checkpoint directory whose shared state holds the full tensors.

    Models come out as plain state dicts, optimizers in ``torch.optim``'s indexed form, so the result
    loads with `fabricx.checkpoint.format.read_checkpoint()`, ``Fabric(accelerator="cpu").load`` or
    any strategy. Per-rank files (data positions, random states) are copied as they are (regular files
    only: a symlink in the checkpoint is refused, never followed). DeepSpeed engine files are read
    weights-only; ``allow_pickle=True`` opts into full unpickling for trusted foreign files.

    Example:
        ```python
        # -> runs/exp/checkpoint_3.consolidated
        out = consolidate_checkpoint("runs/exp/checkpoint_3")
        model.load_state_dict(read_checkpoint(out).shared["model"])
        ```
    """
    loaded = read_checkpoint(path, rank=0)
    if loaded.legacy:
        raise CheckpointError(f"{path} is a single-file checkpoint; it holds full tensors already.")
    if not records_in(loaded.meta):  # each record's module reads its own files (`fabricx.checkpoint.records`)
        raise CheckpointError(
            f"{loaded.path} is not a sharded checkpoint (its meta.json lists no sharded entries); it already "
            "holds full tensors and loads as it is."
        )
    target = Path(output) if output is not None else default_output(loaded.path)
    if target.resolve() == loaded.path.resolve():
        raise CheckpointError(f"The output {target} is the checkpoint itself; choose another path.")
    records_own = record_shared_keys(loaded.meta)
    shared = {key: value for key, value in loaded.shared.items() if key not in records_own}
    opt_in = allow_unsafe_pickle(loaded.path, "each engine file") if allow_pickle else contextlib.nullcontext()
    with opt_in:
        shared.update(read_full(loaded, list(stored_entries(loaded.meta))))
    extra = {"consolidated_from": str(loaded.path), "source_world_size": loaded.meta["world_size"]}
    with CheckpointWriter(target, rank=0, world_size=1, extra_meta=extra) as writer:  # aborts on an error
        writer.write_shared(shared)
        if loaded.per_rank is not None:
            writer.write_rank(loaded.per_rank)
        for file in _other_rank_files(loaded.path, int(loaded.meta["world_size"])):
            shutil.copy2(file, writer.tmp / file.name, follow_symlinks=False)
    return writer.path


def _other_rank_files(directory: Path, world_size: int) -> list[Path]:
    """The per-rank files of ranks 1.. in ``directory`` (found by listing it, whatever meta.json claims),
    each a regular file: a symlink or anything else is refused rather than followed."""
    found = []
    for child in sorted(directory.iterdir()):
        match = _RANK_FILE.fullmatch(child.name)
        if match is None or int(match.group(1)) >= world_size:
            continue
        regular_file(child, "the per-rank file")
        found.append(child)
    return found
