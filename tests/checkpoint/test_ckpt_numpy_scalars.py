"""NumPy scalars in torch files (what Lightning stores for a NumPy hyper-parameter): written by the single-file
layout, read back as the same NumPy types through `numpy_scalars.SAFE_GLOBALS`, and every other use of the
names NumPy pickles through refused with a `CheckpointError`, before NumPy is called.

Crafted files are ``torch.save`` zips whose pickle is written by hand (`_crafted`), so torch's own reader sees
exactly the opcodes given.
"""

from __future__ import annotations

import io
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fabricx import Fabric
from fabricx.checkpoint.numpy_scalars import SAFE_GLOBALS
from fabricx.checkpoint.safe_read import load_torch
from fabricx.utilities.exceptions import CheckpointError

SCALARS = [
    np.bool_(True), np.bool_(False), np.int8(-3), np.int16(300), np.int32(-7), np.int64(2**40), np.uint8(255),
    np.uint16(3), np.uint32(4), np.uint64(2**63), np.float16(-2.5), np.float32(0.1), np.float64(np.nan),
    np.float64(-np.inf), np.complex64(1 - 2j), np.complex128(3 + 4j),
]  # fmt: skip


def _same(loaded: Any, given: Any) -> None:
    assert type(loaded) is type(given)
    assert loaded.tobytes() == given.tobytes()  # NaN included


def _torch_file(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def test_numpy_scalars_torch_save_wrote_load_as_the_same_types() -> None:
    # What Lightning's ModelCheckpoint writes for NumPy hyper-parameters: a plain torch.save pickle.
    loaded = load_torch(_torch_file({"hparams": {"all": SCALARS, "nested": {"idx": np.int64(4)}}}), "a file")
    for value, given in zip(loaded["hparams"]["all"], SCALARS, strict=True):
        _same(value, given)
    _same(loaded["hparams"]["nested"]["idx"], np.int64(4))


def test_single_file_layout_writes_numpy_scalars_and_refuses_other_numpy_values(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.save(tmp_path / "scalars.ckpt", {"hparams": {"all": SCALARS}, "step": np.int64(3)})
    loaded = fabric.load(tmp_path / "scalars.ckpt")
    for value, given in zip(loaded["hparams"]["all"], SCALARS, strict=True):
        _same(value, given)
    _same(loaded["step"], np.int64(3))
    # Plain torch reads it with the same allow-list (as torch's error message advises for NumPy).
    with torch.serialization.safe_globals(SAFE_GLOBALS):
        _same(torch.load(tmp_path / "scalars.ckpt", weights_only=True)["step"], np.int64(3))
    # NumPy values the reader could not rebuild without running NumPy's object machinery: refused at save.
    for value in (np.str_("a"), np.datetime64(0, "s"), np.dtype("f4"), np.longdouble(1), np.array([1, 2])):
        with pytest.raises(CheckpointError, match=r"state\['value'\].*numpy"):
            fabric.save(tmp_path / "refused.ckpt", {"value": value})
    assert not (tmp_path / "refused.ckpt").exists()


# -- crafted pickles ------------------------------------------------------------------------------------------------
def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _plain(value: Any) -> bytes:
    return pickle.dumps(value, protocol=2)[2:-1]  # without PROTO and STOP


def _raw(data: bytes) -> bytes:  # bytes as torch.save pickles them
    return _global("_codecs", "encode") + _plain(data.decode("latin1")) + _plain("latin1") + b"\x86R"


_STATE = (3, "<", None, None, None, -1, -1, 0)


def _dtype(code: str, state: Any = _STATE, args: tuple[Any, ...] = (False, True)) -> bytes:
    built = b"" if state is None else _plain(state) + b"b"  # BUILD
    return _global("numpy", "dtype") + _plain((code, *args)) + b"R" + built


def _scalar(dtype: bytes, data: bytes, module: str = "numpy._core.multiarray") -> bytes:
    return _global(module, "scalar") + dtype + data + b"\x86R"


class _Payload:
    """A pickle module for ``torch.save`` whose Pickler writes ``body`` as the file's ``{"x": body}``."""

    __name__ = "crafted"

    def __init__(self, body: bytes) -> None:
        payload = b"\x80\x02}" + _plain("x") + body + b"s."

        class Pickler:
            def __init__(self, file: Any, protocol: int = 2) -> None:
                self.file = file

            def dump(self, _: Any) -> None:
                self.file.write(payload)

        self.Pickler = Pickler


def _crafted(body: bytes) -> bytes:
    buffer = io.BytesIO()
    torch.save({}, buffer, pickle_module=_Payload(body))  # type: ignore[arg-type]
    return buffer.getvalue()


def test_a_hand_written_scalar_reads_like_numpys_own() -> None:
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # NumPy 2's name and NumPy 1's
        _same(load_torch(_crafted(_scalar(_dtype("i8"), _raw(struct.pack("<q", -5)), module)), "f")["x"], np.int64(-5))
    big_endian = _scalar(_dtype("f8", (3, ">", None, None, None, -1, -1, 0)), _raw(struct.pack(">d", 1.5)))
    _same(load_torch(_crafted(big_endian), "f")["x"], np.float64(1.5))


EIGHT = _raw(b"\0" * 8)
CRAFTED = {
    "object dtype": _scalar(_dtype("O8"), EIGHT),
    "string dtype": _scalar(_dtype("U2"), EIGHT),
    "structured dtype code": _scalar(_dtype("V8"), EIGHT),
    "dtype not built": _scalar(_dtype("i8", state=None), EIGHT),
    "dtype state with object flags": _scalar(_dtype("i8", (3, "<", None, None, None, -1, -1, 63)), EIGHT),
    "dtype state with fields": _scalar(_dtype("i8", (3, "|", None, ("a",), {"a": (1, 0)}, 8, 1, 0)), EIGHT),
    "dtype state with another itemsize": _scalar(_dtype("i8", (3, "<", None, None, None, 4, 4, 0)), EIGHT),
    "aligned dtype": _scalar(_dtype("i8", args=(True, True)), EIGHT),
    "dtype by NEWOBJ": _global("numpy", "dtype") + _plain(("O8",)) + b"\x81",  # NEWOBJ skips __init__
    "too few bytes": _scalar(_dtype("i8"), _raw(b"\0" * 4)),
    "too many bytes": _scalar(_dtype("f4"), EIGHT),
    "a str for bytes": _scalar(_dtype("i8"), _plain("\0" * 8)),
    "a bool of 2": _scalar(_dtype("b1", (3, "|", None, None, None, -1, -1, 0)), _raw(b"\2")),
    "a code for a dtype": _global("numpy._core.multiarray", "scalar") + _plain(("i8", b"\0" * 8)) + b"R",
    "a dtype alone": _dtype("f8"),
    "another numpy name": _global("numpy._core.multiarray", "_reconstruct") + _plain((0, (0,), b"b")) + b"R",
    "numpy.frombuffer": _global("numpy", "frombuffer") + _raw(b"\0" * 8) + b"\x85R",
    "numpy.load": _global("numpy", "load") + _plain(("x.npy",)) + b"R",
}


@pytest.mark.parametrize("name", CRAFTED)
def test_crafted_numpy_pickles_are_refused(name: str) -> None:
    with pytest.raises(CheckpointError, match="the crafted file"):
        load_torch(_crafted(CRAFTED[name]), "the crafted file")
