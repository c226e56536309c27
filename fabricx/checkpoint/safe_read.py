"""The one gate every checkpoint reader goes through: what a file offers is checked before it is trusted.

Every layout's reader (single file and Lightning ``.ckpt``, directory, ``dcp`` with its ``meta.pt``,
``deepspeed``, the Accelerate adapter's folders) takes bytes from disk only through these functions:

* `regular_file()` / `read_regular()`: a regular file inside the checkpoint (no symbolic link leading
  out of it, no named pipe or device, which would block or never end);
* `load_torch()`: a ``torch.save`` file read with torch's allow-listed ``weights_only=True`` unpickler (plus
  the globals a caller names): never runs code; only uncompressed zip records (a compressed one inflates
  past the file's size: a zip bomb); every tensor dense and backed by its own bytes (`check_tensors()`: no
  stride-0 view that claims more elements than the file holds);
* `read_dcp_metadata()`: DCP's metadata through fabricx's restricted unpickler, its declared nesting and
  total size bounded, every byte range checked against the files, before anything is allocated;
* `check_optimizer_state()`: an optimizer state fits the parameters it is restored into;
* `plain_name()` and `inside()`: a name or path taken from a checkpoint's contents stays inside the
  checkpoint, or the run's folder, so it cannot make the run read, write or delete anything else.

A crafted checkpoint therefore cannot run code, escape its folder, block a reader, or make a load allocate
more memory than its files hold: each attempt is a `CheckpointError` naming the file.

Example:

```python
state = load_torch(Path("out/model.pth"), "out/model.pth")
```
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import pickle
import re
import stat
import warnings
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import Tensor

from fabricx.checkpoint.numpy_scalars import SAFE_GLOBALS as NUMPY_SCALARS
from fabricx.checkpoint.numpy_scalars import NumpyDtype
from fabricx.checkpoint.unsafe_pickle import pickle_allowed
from fabricx.utilities.exceptions import CheckpointError

__all__ = [
    "MAX_NESTING",
    "check_optimizer_state",
    "check_tensors",
    "inside",
    "load_torch",
    "open_checked",
    "plain_name",
    "read_dcp_metadata",
    "read_regular",
    "refuse_misfit",
    "regular_file",
]

#: How deeply the containers of a loaded state may nest (a state dict nests a few levels; Python's own
#: recursion ends near 1000, where a crafted file would otherwise turn into a bare ``RecursionError``).
MAX_NESTING = 64

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


# ------------------------------------------------------------------------------------------------- paths


def plain_name(name: Any, where: str) -> str:
    """``name`` if it is a plain file or folder name (one path component, not ``.``/``..``), else an error.

    Example:
        ```python
        plain_name("sharded", "meta.json")      # "sharded"
        plain_name("../etc", "meta.json")       # raises CheckpointError
        ```
    """
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or ":" in name
        or os.path.isabs(name)
    ):
        raise CheckpointError(
            f"{where} names {name!r} as a file of the checkpoint; only a plain name of a file inside the "
            "checkpoint folder is allowed (no absolute paths, separators or '..'). The checkpoint is damaged "
            "or was crafted to read files outside it."
        )
    return name


def inside(path: Any, root: Any) -> bool:
    """Whether ``path`` names an entry strictly inside the folder ``root`` once ``..`` and symbolic links of its
    folders are resolved (the entry itself may be a link: removing it removes the link). URLs compare as
    normalised strings.

    Example:
        ```python
        inside("ckpts/last.ckpt", "ckpts")          # True
        inside("ckpts/../../victim", "ckpts")       # False
        ```
    """
    from fabricx.checkpoint.storage import is_url

    if not isinstance(path, str | os.PathLike) or not isinstance(root, str | os.PathLike):
        return False
    text, base = os.fspath(path), os.fspath(root)
    if "\x00" in text:
        return False
    if is_url(text) or is_url(base):
        import posixpath

        scheme, _, rest = text.partition("://")
        root_scheme, _, root_rest = base.partition("://")
        normal, normal_root = posixpath.normpath(rest), posixpath.normpath(root_rest).rstrip("/")
        return scheme == root_scheme and normal.startswith(normal_root + "/") and ".." not in normal.split("/")
    head, name = os.path.split(text)
    if name in ("", ".", ".."):
        return False
    parent = os.path.realpath(head or ".")
    real_root = os.path.realpath(base)
    return os.path.commonpath([parent, real_root]) == real_root


def regular_file(path: Path, what: str, *, root: Path | None = None, missing: str | None = None) -> os.stat_result:
    """Refuse ``path`` unless it is a regular file (a symbolic link only when ``root`` is given and it leads to a
    regular file inside ``root``); returns its status. A missing file raises `CheckpointError` with ``missing``
    (default: ``"<what> <path> is missing."``).

    Example:
        ```python
        size = regular_file(Path("ckpt/.metadata"), "the sharded checkpoint's metadata").st_size
        ```
    """
    return _admit(path, what, root, missing)


def _admit(path: Path, what: str, root: Path | None, missing: str | None) -> os.stat_result:
    # Every file any reader takes from disk passes here (the test of the gate watches this one function).
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise CheckpointError(missing or f"{_capital(what)} {path} is missing.") from None
    except OSError as error:
        raise CheckpointError(f"Cannot read {what} {path}: {error}") from None
    if stat.S_ISLNK(info.st_mode) and root is not None:
        try:
            target = path.resolve(strict=True)
            if target.is_relative_to(root.resolve(strict=True)):
                info = os.stat(target)
        except (OSError, RuntimeError):
            pass  # a dangling or looping link: `info` stays the link's own, refused just below
        if stat.S_ISLNK(info.st_mode):
            raise CheckpointError(
                f"Refusing to read {what} {path}: it is a symbolic link to a file outside the checkpoint {root}. "
                "A checkpoint holds its own files."
            )
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file (a folder, pipe or device)"
        raise CheckpointError(f"Refusing to read {what} {path}: it is {kind}. A checkpoint holds its own files.")
    return info


def read_regular(path: Path, what: str, *, root: Path | None = None, missing: str | None = None) -> bytes:
    """The bytes of ``path``, once `regular_file()` accepted it; the file is opened without following a link and
    without blocking, and checked again once open (so nothing swapped in meanwhile is read).

    Example:
        ```python
        data = read_regular(Path("ckpt/meta.json"), "the checkpoint's meta.json")
        ```
    """
    regular_file(path, what, root=root, missing=missing)
    target = path.resolve() if root is not None and path.is_symlink() else path
    with open_checked(target, f"{what} {path}") as handle:
        try:
            return handle.read()
        except OSError as error:
            raise CheckpointError(f"Cannot read {what} {path}: {error}") from None


@contextlib.contextmanager
def open_checked(path: Path, what: str) -> Iterator[BinaryIO]:
    """``path`` open for reading, without following a link or blocking, once more checked to be a regular file
    (for readers that take a file's bytes in parts, after `regular_file()` admitted it).

    Example:
        ```python
        with open_checked(Path("ckpt/shared.safetensors"), "the checkpoint file") as handle:
            head = handle.read(8)
        ```
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise CheckpointError(f"Cannot read {what}: {error}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CheckpointError(f"Refusing to read {what}: it is not a regular file.")
        yield handle


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# ------------------------------------------------------------------------------------------- torch files


def _unpickling_detail(message: str) -> str:
    """The part of torch's weights-only refusal that says what was refused (without its boilerplate)."""
    message = re.sub(r"\x1b\[[0-9;]*m", "", message)
    for line in message.splitlines():
        lowered = line.lower()
        for marker in ("unsupported", "trying to load"):
            at = lowered.find(marker)
            if at != -1:
                return line[at:].split(". ")[0].strip().rstrip(".")
    return message.splitlines()[0].strip().rstrip(".") if message else "unknown reason"


def _check_archive(source: Any, what: str) -> None:
    """Refuse what is not a zip ``torch.save`` file of uncompressed records (checked before torch reads it)."""
    try:
        with zipfile.ZipFile(source) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as error:
        raise CheckpointError(
            f"Refusing to load {what}: it is not a torch.save zip file ({error}). fabricx reads torch's zip format "
            "only, whose sizes it checks before allocating (torch's pre-1.6 format and plain pickles declare "
            "sizes it cannot check, and may need unsafe unpickling). If you trust the file, load it with "
            "torch.load(path, weights_only=False) and save it again with torch.save."
        ) from None
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(
                f"Refusing to load {what}: its record {record.filename!r} is compressed, which torch.save never "
                f"writes; inflating it would allocate {record.file_size} bytes from {record.compress_size}. The "
                "file is damaged or crafted."
            )


def load_torch(
    source: Path | bytes,
    what: str,
    *,
    allowed_globals: Iterable[Any] = (),
    allow_pickle: bool = False,
    trust_hint: str = "If you trust the file, load it with torch.load(path, weights_only=False) and save plain "
    "tensors and containers instead.",
    map_location: Any = "cpu",
    mmap: bool = False,
) -> Any:
    """A ``torch.save`` file (a path or its bytes) read without running code and without allocating more than it
    holds; every problem is a `CheckpointError` naming ``what``.

    ``allowed_globals`` are classes the unpickler may build besides torch's own allow-list (DeepSpeed's loss
    scalers); ``allow_pickle`` (or ``fabric.load(..., weights_only=False)``) unpickles anything, for files
    the caller trusts; a regular file is still required.

    Example:
        ```python
        state = load_torch(Path("out/model.pth"), "the checkpoint out/model.pth")
        ```
    """
    if isinstance(source, Path):
        regular_file(source, what)
    if allow_pickle or pickle_allowed():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            file = source if isinstance(source, Path) else io.BytesIO(source)
            return torch.load(file, map_location=map_location, weights_only=False, mmap=mmap)  # type: ignore[arg-type]
    if isinstance(source, Path):
        with open_checked(source, what) as handle:
            _check_archive(handle, what)
    else:
        _check_archive(io.BytesIO(source), what)
    try:
        with warnings.catch_warnings(), torch.serialization.safe_globals([*allowed_globals, *NUMPY_SCALARS]):
            # torch warns about pickle protocols it may not handle; the outcome is reported below anyway.
            warnings.filterwarnings("ignore", message=".*pickle protocol", category=UserWarning)
            file = source if isinstance(source, Path) else io.BytesIO(source)
            loaded = torch.load(file, map_location=map_location, weights_only=True, mmap=mmap)  # type: ignore[arg-type]
    except pickle.UnpicklingError as error:
        detail = _unpickling_detail(str(error))
        if "global" in detail.lower():
            raise CheckpointError(
                f"Refusing to load {what}: {detail}. Reading it would need unsafe unpickling, which can run "
                f"arbitrary code, so nothing was executed. {trust_hint}"
            ) from None
        raise CheckpointError(
            f"Cannot load {what}: the weights-only reader rejected it ({detail}). It is damaged, not a "
            "torch.save file, or would need unsafe unpickling (which fabricx never does)."
        ) from None
    except CheckpointError:
        raise
    except Exception as error:
        raise CheckpointError(
            f"Cannot load {what} as a torch.save file (truncated or damaged?): "
            f"{type(error).__name__}: {str(error)[:300]}"
        ) from None
    check_tensors(loaded, what)
    return loaded


def check_tensors(value: Any, what: str) -> None:
    """Refuse a loaded value whose containers nest deeper than `MAX_NESTING`, or that holds a tensor that is not
    dense or whose elements do not all have their own bytes (an expanded, stride-0 view: copying it out would
    allocate memory the file does not hold).

    Example:
        ```python
        check_tensors({"w": torch.zeros(1).expand(10)}, "state")  # raises CheckpointError
        ```
    """
    seen: set[int] = set()
    pending: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while pending:
        item, trail = pending.pop()
        if isinstance(item, Tensor):
            _check_tensor(item, what, trail)
            continue
        if isinstance(item, Mapping):
            children: Iterable[tuple[Any, Any]] = item.items()
        elif isinstance(item, list | tuple | set | frozenset):
            children = enumerate(item)
        elif isinstance(item, NumpyDtype):  # only a NumPy scalar's own dtype is read (numpy_scalars.py)
            raise CheckpointError(
                f"Refusing to load {what}: {_where(trail)} is a NumPy dtype on its own, which fabricx reads only "
                "inside a NumPy scalar. Store its name (str(dtype)) instead."
            )
        else:
            continue
        if id(item) in seen:
            continue
        seen.add(id(item))
        if len(trail) >= MAX_NESTING:
            raise CheckpointError(
                f"{what} is damaged: its containers nest more than {MAX_NESTING} levels deep at {_where(trail)}."
            )
        pending.extend((child, (*trail, key)) for key, child in children)


def _where(trail: tuple[Any, ...]) -> str:
    return "state" + "".join(f"[{key!r}]" for key in trail[:12]) + ("..." if len(trail) > 12 else "")


def _check_tensor(tensor: Tensor, what: str, trail: tuple[Any, ...]) -> None:
    if tensor.layout != torch.strided:
        raise CheckpointError(f"{what} is damaged: {_where(trail)} is a {tensor.layout} tensor, not a dense one.")
    if tensor.device.type == "meta":
        return  # no storage: nothing to allocate, and loading it into anything fails by name
    stored = tensor.untyped_storage().nbytes()
    if tensor.numel() and tensor.numel() * tensor.element_size() > stored:
        raise CheckpointError(
            f"{what} is damaged: {_where(trail)} is a {tuple(tensor.shape)} view of only {stored} bytes (an "
            "expanded tensor); a checkpoint stores every element."
        )


# ------------------------------------------------------------------------------------------ optimizers


def check_optimizer_state(optimizer: torch.optim.Optimizer, value: Any, where: str) -> None:
    """Refuse an optimizer state whose per-parameter tensors are larger than their parameters, or whose state
    belongs to no parameter of its groups (an Adam ``exp_avg`` of 2^28 elements for a 4x4 weight).

    A state tensor has its parameter's shape or fewer elements (factored states, such as Adafactor's rows).

    Example:
        ```python
        check_optimizer_state(optimizer, torch.load("opt.pt", weights_only=True), "entry 'optimizer'")
        ```
    """
    if not isinstance(value, Mapping) or not isinstance(value.get("state"), Mapping):
        return  # not a torch optimizer state dict: the optimizer's own load_state_dict says what is wrong
    groups = value.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in groups
    ):
        return
    saved_ids = [index for group in groups for index in group["params"]]
    live = [param for group in optimizer.param_groups for param in group["params"]]
    if len(saved_ids) != len(live):
        return  # torch's load_state_dict refuses this with its own message
    parameters = dict(zip(saved_ids, live, strict=True)) if all(isinstance(i, int | str) for i in saved_ids) else {}
    problems = []
    for index, entry in value["state"].items():
        if not isinstance(index, int | str) or index not in parameters:
            problems.append(f"state {index!r} belongs to no parameter of the saved param_groups")
            continue
        if not isinstance(entry, Mapping):
            continue
        param = parameters[index]
        for name, tensor in entry.items():
            if not isinstance(tensor, Tensor) or tensor.numel() <= 1:
                continue
            if tensor.numel() > param.numel() or (tensor.numel() == param.numel() and tensor.shape != param.shape):
                problems.append(
                    f"state[{index!r}][{name!r}] has shape {list(tensor.shape)} for a parameter of shape "
                    f"{list(param.shape)}"
                )
    target = f"optimizer {type(optimizer).__name__}"
    refuse_misfit(where, target, problems, "It was saved for other parameters, or is damaged.")


def refuse_misfit(where: str, target: str, problems: list[str], advice: str) -> None:
    """Raise when the ``where`` (a saved state) has ``problems`` against the live ``target`` (``"model Net"``):
    the first eight of them, then what to do (``advice``)."""
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise CheckpointError(f"The {where} does not fit the {target}: {shown}. {advice}")


# ------------------------------------------------------------------------------------------- DCP metadata


def read_dcp_metadata(directory: Path) -> Any:
    """``directory/.metadata`` read with fabricx's restricted unpickler (nothing is executed), its nesting and
    declared sizes bounded, and every storage item checked against the files beside it (a plain name of a
    regular file, byte ranges inside it and not overlapping, each tensor backed by its stored bytes).

    Example:
        ```python
        metadata = read_dcp_metadata(Path("ckpt/sharded"))
        sorted(metadata.state_dict_metadata)
        ```
    """
    from fabricx._compat.dcp_metadata import MetadataRefused, unpickle_dcp_metadata

    file = directory / ".metadata"
    data = read_regular(
        file,
        "the sharded checkpoint's metadata",
        missing=f"{directory} is not a complete sharded checkpoint: no {file.name}.",
    )
    try:
        metadata = unpickle_dcp_metadata(data, file)
    except MetadataRefused as refused:
        raise CheckpointError(str(refused)) from None
    _check_dcp_storage(directory, metadata)
    return metadata


def _check_dcp_storage(root: Path, metadata: Any) -> None:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta_file = root / ".metadata"
    sizes: dict[str, int] = {}
    ranges: dict[str, list[tuple[int, int]]] = {}
    by_key: dict[tuple[str, tuple[int, ...] | None], int] = {}
    for index, info in metadata.storage_data.items():
        name = plain_name(info.relative_path, f"{meta_file} (storage of {index.fqn!r})")
        if name not in sizes:
            sizes[name] = regular_file(
                root / name,
                f"{root / name}, listed in {meta_file},",
                missing=f"{meta_file} lists the storage file {root / name}, which is missing.",
            ).st_size
        end = info.offset + info.length
        if end > sizes[name]:
            raise CheckpointError(
                f"{meta_file} is damaged: the storage of {index.fqn!r} is bytes {info.offset}..{end} of "
                f"{root / name}, which has only {sizes[name]} bytes (truncated?)."
            )
        ranges.setdefault(name, []).append((info.offset, end))
        key = (index.fqn, tuple(index.offset) if index.offset is not None else None)
        by_key[key] = by_key.get(key, 0) + info.length
    for name, spans in ranges.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            if start < end:
                raise CheckpointError(
                    f"{meta_file} is damaged: two stored items overlap in {root / name}; each byte of a "
                    "sharded checkpoint belongs to one item."
                )
    for name, entry in metadata.state_dict_metadata.items():
        if type(entry) is not TensorStorageMetadata:
            continue
        itemsize = torch.empty(0, dtype=entry.properties.dtype).element_size()
        stored = 0
        for chunk in entry.chunks:
            length = by_key.get((name, tuple(chunk.offsets)))
            if length is None:
                raise CheckpointError(
                    f"{meta_file} is damaged: the chunk of {name!r} at {tuple(chunk.offsets)} has no stored data."
                )
            if math.prod(chunk.sizes) * itemsize > length:
                raise CheckpointError(
                    f"{meta_file} is damaged: the chunk of {name!r} at {tuple(chunk.offsets)} claims "
                    f"{math.prod(chunk.sizes) * itemsize} bytes, but only {length} are stored for it."
                )
            stored += length
        needed = math.prod(entry.size) * itemsize
        if needed > stored:
            raise CheckpointError(
                f"{meta_file} is damaged: {name!r} claims size {tuple(entry.size)} ({needed} bytes) but its "
                f"chunks store {stored} bytes; reading it would allocate memory the checkpoint does not hold."
            )
