"""A safetensors file read straight into fresh tensors: one ``pread`` per tensor into memory nothing else holds.

The header is parsed and checked by the safetensors library itself (dtypes, shapes, every byte range inside the
file, ranges in order without gaps or overlaps, the file wholly covered); this module only lays the tensors out in
that order and reads each one's bytes into its own new tensor. Nothing is memory-mapped, so a file truncated or
failing under the reader is a `CheckpointError` (never a ``SIGBUS``), raised before any tensor is handed to
anyone: a load that fails here changes nothing.

Example:

```python
tensors = read_safetensors(Path("ckpt/shared.safetensors"), "the checkpoint file")
```
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from fabricx.checkpoint.safe_read import open_checked, regular_file
from fabricx.utilities.exceptions import CheckpointError

__all__ = ["read_safetensors"]

_DTYPES = {
    name: dtype
    for name, attr in (
        *(("F64", "float64"), ("F32", "float32"), ("F16", "float16"), ("BF16", "bfloat16"), ("C64", "complex64")),
        *(("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"), ("BOOL", "bool")),
        *(("I64", "int64"), ("I32", "int32"), ("I16", "int16"), ("I8", "int8")),
        *(("U64", "uint64"), ("U32", "uint32"), ("U16", "uint16"), ("U8", "uint8")),
    )
    if isinstance(dtype := getattr(torch, attr, None), torch.dtype)
}


def read_safetensors(path: Path, what: str, *, root: Path | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors file ``path``, each in fresh CPU memory of its own (contiguous, not shared).

    Every problem (a damaged header, a truncated file, an I/O error mid-read) is a `CheckpointError` naming
    ``what`` and the file.

    Example:
        ```python
        read_safetensors(Path("ckpt/shared.safetensors"), "the checkpoint file")["t0"].shape
        ```
    """
    regular_file(path, what, root=root)
    target = path.resolve() if root is not None and path.is_symlink() else path
    layout = _layout(target, what)
    with open_checked(target, f"{what} {path}") as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        header = _read_exactly(fd, bytearray(8), 0, what, path)
        begin = 8 + struct.unpack("<Q", header)[0]
        if begin + sum(nbytes for _, _, _, nbytes in layout) != size:
            raise CheckpointError(
                f"{_capital(what)} {path} changed while it was read ({size} bytes now, not what its header "
                "describes). Load it again once no job is writing it."
            )
        tensors: dict[str, torch.Tensor] = {}
        offset = begin
        for name, dtype, shape, nbytes in layout:
            buffer = torch.empty(nbytes, dtype=torch.uint8)
            if nbytes:
                _read_exactly(fd, buffer.numpy(), offset, what, path)
            tensors[name] = buffer.view(dtype).view(shape)
            offset += nbytes
    return tensors


def _layout(path: Path, what: str) -> list[tuple[str, torch.dtype, list[int], int]]:
    """``(name, dtype, shape, bytes)`` of each tensor in file order, as the safetensors library validated them."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            specs = [(name, handle.get_slice(name)) for name in handle.offset_keys()]
            described = [(name, spec.get_dtype(), list(spec.get_shape())) for name, spec in specs]
    except FileNotFoundError:
        raise CheckpointError(f"{_capital(what)} {path} is missing.") from None
    except Exception as error:  # the safetensors reader raises its own error types for damaged files
        raise CheckpointError(
            f"Cannot read tensors from {path} (truncated or damaged?): {type(error).__name__}: {error}"
        ) from None
    layout = []
    for name, dtype_name, shape in described:
        dtype = _DTYPES.get(dtype_name)
        if dtype is None:
            raise CheckpointError(
                f"Cannot read tensors from {path}: {name!r} has dtype {dtype_name}, which fabricx never writes "
                f"(it reads {', '.join(sorted(_DTYPES))}). The file is damaged or was written by another tool."
            )
        layout.append((name, dtype, shape, math.prod(shape) * dtype.itemsize))
    return layout


def _read_exactly(fd: int, into: Any, offset: int, what: str, path: Path) -> Any:
    """Fill the writable buffer ``into`` (a bytearray, a NumPy array) from ``offset`` of the file ``fd``."""
    view = memoryview(into).cast("B")
    done = 0
    while done < len(view):
        try:
            count = os.preadv(fd, [view[done:]], offset + done)
        except OSError as error:
            raise CheckpointError(
                f"Cannot read {what} {path}: {error}. Nothing was loaded from it; the objects it was to restore "
                "are as they were."
            ) from None
        if count == 0:
            raise CheckpointError(
                f"{_capital(what)} {path} ended after {offset + done} bytes while it was read (truncated meanwhile?). "
                "Nothing was loaded from it; the objects it was to restore are as they were."
            )
        done += count
    return into


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
