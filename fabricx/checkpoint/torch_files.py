"""The ``torch.save`` files layouts share (not itself a layout): checking, writing and reading them code-free.

A single-file checkpoint's top level is the user's state as Lightning Fabric writes it: a module's entry is
its state dict, an optimizer's its state dict, a plain value itself. fabricx's own entries sit beside them
under reserved keys (`__fabricx_rng__`, `__fabricx_precision__`, ...), which other readers return as
unrequested entries:

    <user keys>                  rank 0's view: state dicts and plain values
    __fabricx_single_file__      format, version, world size, per-rank keys
    __fabricx_ranks__            the per-rank entries (RNG, loader position,
                                 ...) of ranks 1..N-1

fabricx's entries may hold NumPy arrays (random states); they are stored as tensors tagged
`__fabricx_numpy__` so the file stays weights-only. A user entry that `weights_only=True` could not read
back is refused, naming the entry; NumPy scalars are kept as Lightning keeps them (read back through
`numpy_scalars.SAFE_GLOBALS`). Reading goes through the gate (`fabricx.checkpoint.safe_read.load_torch`):
a file that needs anything but the allow-listed unpickler is refused with a `CheckpointError`.

The single-file layout (`fabricx.checkpoint.layouts.single_file`), the `dcp` and `deepspeed` layouts (their
``meta.pt``) and `fabricx.checkpoint.format` use it.

Example:

```python
per_rank = {"__fabricx_rng__": rng}
contents = file_contents(strategy, "out.pth", {"step": 3}, per_rank, ())
write_file("out.pth", contents)
shared, per_rank, meta = read_single_file(Path("out/model.pth"), rank=0)
```
"""

from __future__ import annotations

import io
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch

from fabricx.checkpoint.contents import is_reserved, lent_to_new_ranks
from fabricx.checkpoint.host import RankHost
from fabricx.checkpoint.io import CheckpointIO, LocalCheckpointIO
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.numpy_scalars import is_numpy_scalar
from fabricx.checkpoint.safe_read import load_torch
from fabricx.checkpoint.storage import io_for, is_url
from fabricx.checkpoint.write_errors import write_failure
from fabricx.utilities.exceptions import CheckpointError
from fabricx.version import __version__

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "META_KEY",
    "RANKS_KEY",
    "check_header",
    "check_weights_only",
    "file_contents",
    "load_single_file",
    "looks_like_torch_file",
    "read_single_file",
    "split_contents",
    "write_file",
]

FORMAT_NAME = "fabricx-single-file"
FORMAT_VERSION = 1
#: Top-level key of the file's metadata (a reserved fabricx key: other readers return it as unrequested).
META_KEY = "__fabricx_single_file__"
#: Top-level key of ranks 1..N-1's per-rank entries (``{"1": {...}, ...}``).
RANKS_KEY = "__fabricx_ranks__"
_NUMPY_TAG = "__fabricx_numpy__"
_LOCAL_IO = LocalCheckpointIO()


# ------------------------------------------------------------------------------------------ checking

# Exact types (a subclass is pickled by reference and needs unsafe unpickling to load).
_LEAVES = frozenset({str, int, float, bool, bytes, complex, torch.dtype, torch.Size, torch.device, type(None)})
_DIRECTORY_HINT = (
    "or keep the directory layout, which stores NumPy values: save to a path without a file suffix, or pass "
    "layout='directory'"
)


def check_weights_only(value: Any, where: str = "the state", file: Any = None) -> None:
    """Raise `CheckpointError` naming the first part of ``value`` that ``weights_only=True`` cannot read.

    Example:

    ```python
    check_weights_only({"model": model.state_dict(), "step": 3}, "state")  # passes
    # CheckpointError naming state['args']
    check_weights_only({"args": argparse.Namespace()}, "state")
    ```
    """
    try:
        _check(value, where, file)
    except RecursionError:
        raise CheckpointError(f"Cannot save {where} to a single file: it is nested too deeply.") from None


def _check(value: Any, where: str, file: Any) -> None:
    kind = type(value)
    if isinstance(value, torch.Tensor):
        if kind not in (torch.Tensor, torch.nn.Parameter):
            raise CheckpointError(
                f"Cannot save {where}{_into(file)}: it is a {kind.__qualname__}, a tensor subclass that "
                "torch.load(weights_only=True) cannot read back without running code. Store a plain tensor "
                "(tensor.as_subclass(torch.Tensor) or .full_tensor() for a DTensor)."
            )
        return
    if kind in _LEAVES or is_numpy_scalar(value):  # NumPy scalars: as Lightning stores them (numpy_scalars.py)
        return
    if kind in (dict, OrderedDict):
        for key, item in value.items():
            _check(key, f"a key of {where}", file)
            _check(item, f"{where}[{key!r}]", file)
        return
    if kind in (list, tuple, set, frozenset):
        for i, item in enumerate(value):
            _check(item, f"{where}[{i}]", file)
        return
    name = f"{kind.__module__}.{kind.__qualname__}"
    numpy = kind.__module__.split(".")[0] == "numpy"
    remedy = (
        f"Convert it (torch.from_numpy(array), value.item() for a scalar), {_DIRECTORY_HINT}"
        if numpy
        else "Convert it to plain values (dicts, lists, numbers, strings, tensors), or give the object a "
        "state_dict() that returns them"
    )
    raise CheckpointError(
        f"Cannot save {where}{_into(file)}: it is a {name}, which torch.load(weights_only=True) cannot read "
        f"back without running code. {remedy}."
    )


def _into(file: Any) -> str:
    return f" into the single file {file}" if file is not None else " to a single file"


# ------------------------------------------------------------------------------ fabricx's own entries


# Unsigned dtypes torch stores without a typed-storage class (torch.save records them otherwise, and readers of
# torch's format such as Lightning's lazy loader expect one): kept as the signed type of the same width.
_UNSIGNED_AS_SIGNED = {"uint16": "int16", "uint32": "int32", "uint64": "int64"}


def _numpy_entry(array: Any, **tags: Any) -> dict[str, Any]:
    signed = _UNSIGNED_AS_SIGNED.get(str(array.dtype))
    if signed is not None:
        return {_NUMPY_TAG: torch.from_numpy(array.view(signed)), "dtype": str(array.dtype), **tags}
    return {_NUMPY_TAG: torch.from_numpy(array), **tags}


def _encode(value: Any) -> Any:
    """fabricx's entries with NumPy values (random states) as tagged tensors, so the file stays weights-only."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.ndarray) and value.dtype.kind in "biuf":
            return _numpy_entry(numpy.ascontiguousarray(value).copy(), shape=list(value.shape))
        if isinstance(value, numpy.generic) and value.dtype.kind in "biuf":
            return _numpy_entry(numpy.asarray(value).reshape(1), scalar=True)
    if type(value) in (dict, OrderedDict):
        return type(value)((key, _encode(item)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(_encode(item) for item in value)
    return value


def _decode(value: Any, file: Any = None) -> Any:
    if type(value) in (dict, OrderedDict):
        if _NUMPY_TAG in value and isinstance(value[_NUMPY_TAG], torch.Tensor):
            return _numpy_value(value, file)
        return type(value)((key, _decode(item, file)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(_decode(item, file) for item in value)
    return value


def _numpy_value(value: dict[str, Any], file: Any) -> Any:
    array = value[_NUMPY_TAG].numpy()
    if value.get("dtype") in _UNSIGNED_AS_SIGNED:  # an unsigned array stored as its signed view
        array = array.view(value["dtype"])
    if value.get("scalar"):
        if array.size != 1:
            raise CheckpointError(f"{file} is damaged: a NumPy scalar of fabricx's holds {array.size} values.")
        return array.reshape(())[()]
    shape = value.get("shape", list(array.shape))
    if (
        not isinstance(shape, list | tuple)
        or not all(type(d) is int and d >= 0 for d in shape)
        or (math.prod(shape) != array.size)
    ):
        raise CheckpointError(
            f"{file} is damaged: a NumPy array of fabricx's declares the shape {shape!r:.80} for {array.size} values."
        )
    return array.reshape(shape)


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.device.type != "cpu" else value.detach()
    if type(value) in (dict, OrderedDict):
        return type(value)((key, _to_cpu(item)) for key, item in value.items())
    if type(value) in (list, tuple):
        return type(value)(_to_cpu(item) for item in value)
    return value


# ---------------------------------------------------------------------------------------------- writing


def file_contents(
    host: RankHost,
    path: Any,
    shared: dict[str, Any],
    per_rank: dict[str, Any],
    extra_keys: Collection[str] | None = None,
    *,
    rank_view: bool = False,
    check_shared: bool = True,
) -> dict[str, Any] | None:
    """Every rank: check, gather the per-rank entries to rank 0; rank 0 gets the file's dict, the others None.

    Every rank takes part in the same collectives and raises the same error when any rank's state is refused.
    With ``rank_view=True`` the other ranks get their own view instead of None: the shared entries and
    their own per-rank ones, without the file's metadata (what a tool that writes a file per rank stores).
    ``check_shared=False`` leaves the shared entries to the writer (a library's own checkpoint I/O stores
    objects of its own, as Lightning's plugins may); the per-rank entries are always checked (they travel).
    ``extra_keys`` are the shared entries that are fabricx's own (NumPy values stored as tagged tensors); by
    default those under reserved keys.

    Example:

    ```python
    contents = file_contents(strategy, "out/model.pth", {"step": 3}, {"__fabricx_rng__": rng}, extra_keys=())
    ```
    """
    rank, world_size = host.global_rank, host.world_size
    if extra_keys is None:
        extra_keys = [key for key in shared if is_reserved(key)]
    own = _to_cpu(_encode(per_rank))
    problem: str | None = None
    try:
        if rank == 0:
            for key, value in shared.items() if check_shared else ():
                check_weights_only(_encode(value) if key in extra_keys else value, f"state[{key!r}]", path)
            clash = sorted(k for k in shared if k in per_rank or k in (META_KEY, RANKS_KEY))
            if clash:
                raise CheckpointError(f"Cannot save {clash} into the single file {path}: those keys are taken.")
        for key, value in own.items():
            check_weights_only(value, f"state[{key!r}] (rank {rank})", path)
    except CheckpointError as error:
        problem = str(error)
    ranks: dict[str, Any] = {}
    if world_size > 1:
        problem = host.broadcast(problem, src=0) if rank == 0 or problem is None else problem
        for src in range(1, world_size):  # every rank joins every broadcast, so none is left waiting
            mine = ("error", problem) if problem and rank == src else ("ok", _to_bytes(own) if rank == src else b"")
            sent = host.broadcast(mine, src=src)
            if sent[0] == "error" and problem is None:
                problem = sent[1]
            elif rank == 0 and sent[0] == "ok":
                ranks[str(src)] = load_torch(sent[1], f"the entries rank {src} sent for {path}")
    if problem is not None:
        raise CheckpointError(problem)
    if rank != 0 and not rank_view:
        return None
    contents: dict[str, Any] = {
        key: (_encode(value) if key in extra_keys else value) for key, value in _to_cpu(shared).items()
    }
    contents.update(own)
    if rank != 0:
        return contents
    contents[META_KEY] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "fabricx_version": __version__,
        "world_size": world_size,
        "created": time.time(),
        "shared_keys": list(shared),
        "per_rank_keys": list(per_rank),
        "encoded_keys": sorted({*extra_keys, *per_rank}),
    }
    if ranks:
        contents[RANKS_KEY] = ranks
    return contents


def _to_bytes(entries: dict[str, Any]) -> bytes:
    # Sent as a torch.save file and read back weights-only: rank 0 runs no code another rank sent.
    buffer = io.BytesIO()
    torch.save(entries, buffer)
    return buffer.getvalue()


def write_file(path: Any, contents: dict[str, Any], storage: CheckpointIO | None = None) -> Any:
    """Atomically write ``contents`` with ``torch.save`` (temporary file, fsync, rename, folder fsync).

    Example:

    ```python
    write_file("model.ckpt", {"state_dict": model.state_dict(), "epoch": 3})
    ```
    """
    target: Any = path if is_url(path) else Path(path)
    if not is_url(path) and target.is_dir():
        raise CheckpointError(
            f"Cannot save the single file {target}: a directory is there (a checkpoint saved by an older fabricx, "
            "which wrote folders for every path?). Remove it, save to another name, or pass layout='directory' "
            "to write a checkpoint directory there again."
        )
    try:
        io_for(path, storage or _LOCAL_IO).write_file(target, lambda handle: torch.save(contents, handle))
    except OSError as error:
        raise write_failure(target, error) from error
    return target


# -------------------------------------------------------------------------------------------- reading


def _load(file: Path) -> Any:
    return load_torch(file, str(file))


def check_header(file: Any, meta: Mapping[str, Any], kind: str, latest: int) -> None:
    """Refuse checkpoint metadata of a ``kind`` format version this fabricx cannot read (1 to ``latest``), or
    of a world size below 1."""
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= latest:
        raise CheckpointError(
            f"{file} declares {kind} format version {version!r}; this fabricx ({__version__}) supports versions 1 "
            f"to {latest}. Load it with the fabricx version that wrote it, or upgrade fabricx."
        )
    world_size = meta.get("world_size")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise CheckpointError(f"{file} is damaged: world_size is {world_size!r}, expected an int >= 1.")


def _check_meta(file: Path, meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping) or meta.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{file} is damaged: its {META_KEY!r} entry is not fabricx single-file metadata.")
    check_header(file, meta, "single-file", FORMAT_VERSION)
    for field in ("shared_keys", "per_rank_keys", "encoded_keys"):
        keys = meta.get(field)
        if keys is not None and not (isinstance(keys, list | tuple) and all(isinstance(k, str) for k in keys)):
            raise CheckpointError(f"{file} is damaged: {field} is {keys!r:.80}, expected a list of entry names.")
    return dict(meta)


def read_single_file(file: Path, rank: int = 0) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """``(shared entries, this rank's entries or None, metadata)`` of a single-file checkpoint, code-free.

    A file fabricx did not write (``torch.save({...})``, Lightning's ``fabric.save``/``.ckpt``) has no
    per-rank entries: everything is shared, and the metadata says ``legacy``. A rank the saving run did
    not have gets rank 0's entries without its random states (its data loaders decide whether they
    can continue).

    Example:

    ```python
    shared, per_rank, meta = read_single_file(Path("out/model.pth"), rank=0)
    ```
    """
    state = _load(file)
    if not isinstance(state, dict):
        raise CheckpointError(f"{file} holds a {type(state).__name__}; a single-file checkpoint must hold a dict.")
    return split_contents(file, state, rank)


def split_contents(
    file: Path, state: dict[str, Any], rank: int = 0
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """`read_single_file()` of contents already read (``state``, taken apart in place) from ``file``.

    Example:

    ```python
    shared, per_rank, meta = split_contents(Path("x.pt"), torch.load("x.pt", weights_only=True), rank=0)
    ```
    """
    if META_KEY not in state:
        return state, None, {"format_version": 0, "legacy": True, "world_size": 1}
    meta = _check_meta(file, state.pop(META_KEY))
    ranks = state.pop(RANKS_KEY, {})
    encoded = set(meta.get("encoded_keys") or ())
    per_rank_keys = [key for key in meta.get("per_rank_keys") or () if isinstance(key, str)]
    rank0 = {key: state.pop(key) for key in per_rank_keys if key in state}
    shared = {key: (_decode(value, file) if key in encoded else value) for key, value in state.items()}
    if rank == 0:
        own: dict[str, Any] | None = rank0
    elif isinstance(ranks, Mapping) and isinstance(ranks.get(str(rank)), Mapping):
        own = dict(ranks[str(rank)])
    else:  # more processes now than when it was saved
        own = {key: value for key, value in rank0.items() if lent_to_new_ranks(key)}
    return shared, _decode(own, file), meta


def load_single_file(file: Path, rank: int = 0) -> LoadedCheckpoint:
    """`read_single_file()` as a `fabricx.checkpoint.loaded.LoadedCheckpoint`.

    Example:

    ```python
    loaded = load_single_file(Path("out/model.pth"), rank=0)
    ```
    """
    shared, per_rank, meta = read_single_file(file, rank)
    return LoadedCheckpoint(shared=shared, per_rank=per_rank, meta=meta, path=file, legacy=bool(meta.get("legacy")))


def looks_like_torch_file(file: Path) -> bool:
    """Whether ``file`` is a whole ``torch.save`` zip file (its directory, at the end, lists the pickle),
    without loading it: a truncated or stray file is not.

    Example:

    ```python
    looks_like_torch_file(Path("out/model.pth"))  # True
    ```
    """
    import zipfile

    try:
        with zipfile.ZipFile(file) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        return False
