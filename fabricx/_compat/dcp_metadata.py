"""Reading a ``torch.distributed.checkpoint`` ``.metadata`` file without running code, and checking it.

DCP stores its metadata as a pickle. `unpickle_dcp_metadata()` runs that pickle on a restricted
machine that knows only data opcodes plus the few object opcodes DCP's metadata needs, and builds
only DCP's own metadata classes: every ``GLOBAL``/``STACK_GLOBAL`` must name one of them (exact
module and name, no dotted paths), ``REDUCE`` may only call a handful of value constructors
(``torch.Size``, layouts, the memory-format enum, ``OrderedDict``, paths), ``NEWOBJ``/``BUILD`` only
create and fill DCP's dataclasses (only their own fields), and ``INST``, ``OBJ``, ``NEWOBJ_EX``,
extension codes and persistent ids are refused. Nothing in the file can import a module or call a
function of its choosing.

It then checks the structure of what was read: the types of every field, the dimensions, and the key
paths of the planner data, whose depth and the total size of the lists they declare are bounded before
anything is built from them. `fabricx.checkpoint.safe_read.read_dcp_metadata` reads the file (a regular
file only) and checks the storage against the files beside it.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path, PosixPath, PurePosixPath, PureWindowsPath, WindowsPath
from typing import Any, TypeGuard

import torch


class MetadataRefused(ValueError):
    """A ``.metadata`` file the restricted unpickler will not build (the reader raises it as a `CheckpointError`;
    `_compat` imports nothing of fabricx)."""


__all__ = ["MetadataRefused", "unpickle_dcp_metadata"]

#: More dimensions than torch itself allows for a tensor.
_MAX_DIMS = 64
#: Longest key path of a flattened entry (nesting depth of the saved state dict).
_MAX_PATH = 64
#: Largest list index a flattened key path may use (DCP would grow a list to it).
_MAX_LIST_INDEX = 1 << 16
#: List slots the key paths may declare beyond one per key element (a list whose last items hold nothing).
_LIST_SLACK = 1024


# ------------------------------------------------------------------------------------ the restricted unpickler


def _allowed() -> tuple[dict[tuple[str, str], Any], frozenset[type], dict[Any, Any]]:
    from torch.distributed.checkpoint import filesystem, metadata

    names = (
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    )
    found: dict[tuple[str, str], Any] = {
        ("torch.distributed.checkpoint.metadata", name): getattr(metadata, name) for name in names
    }
    found[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = filesystem._StorageInfo
    found[("torch.serialization", "_get_layout")] = torch.serialization._get_layout
    found[("torch", "Size")] = torch.Size
    found[("collections", "OrderedDict")] = OrderedDict
    for path_class in (PosixPath, PurePosixPath, WindowsPath, PureWindowsPath):
        found[("pathlib", path_class.__name__)] = path_class
    for name, value in vars(torch).items():
        if isinstance(value, torch.dtype):
            found[("torch", name)] = value
    dataclasses = frozenset(found[("torch.distributed.checkpoint.metadata", n)] for n in names[:-1]) | {
        filesystem._StorageInfo
    }
    reducers: dict[Any, Any] = {
        torch.Size: _size_args,
        torch.serialization._get_layout: _layout_args,
        metadata._MEM_FORMAT_ENCODING: _enum_args,
        OrderedDict: _ordered_dict_args,
        **{cls: _path_args for cls in (PosixPath, PurePosixPath, WindowsPath, PureWindowsPath)},
    }
    return found, dataclasses, reducers


def _size_args(args: tuple) -> bool:
    return (
        len(args) == 1
        and isinstance(args[0], (tuple, list))
        and len(args[0]) <= _MAX_DIMS
        and all(type(d) is int for d in args[0])
    )


def _layout_args(args: tuple) -> bool:
    return len(args) == 1 and isinstance(args[0], str) and len(args[0]) <= 64


def _enum_args(args: tuple) -> bool:
    return len(args) == 1 and type(args[0]) is int


def _ordered_dict_args(args: tuple) -> bool:
    return len(args) == 0 or (len(args) == 1 and isinstance(args[0], list))


def _path_args(args: tuple) -> bool:
    return all(isinstance(a, str) for a in args)


_ALLOWED: tuple[dict[tuple[str, str], Any], frozenset[type], dict[Any, Any]] | None = None


def _allow_lists() -> tuple[dict[tuple[str, str], Any], frozenset[type], dict[Any, Any]]:
    global _ALLOWED
    if _ALLOWED is None:
        _ALLOWED = _allowed()
    return _ALLOWED


class _Refused(Exception):
    """Internal: the pickle asked for something a DCP metadata file never needs."""


# Opcodes that only build plain data (numbers, strings, bytes, containers, memo, framing).
_DATA_OPCODES = frozenset(
    op.code.encode("latin-1")[0]
    for op in __import__("pickletools").opcodes
    if op.name
    in {
        "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE",
        "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
        "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES",
        "BINBYTES8", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "LIST",
        "APPEND", "APPENDS", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS",
        "FROZENSET", "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET", "MEMOIZE",
    }
)  # fmt: skip


def _opcode(name: str) -> int:
    return getattr(pickle, name)[0]


class _MetadataUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """Python's own unpickling machine with every object-building opcode replaced by a checked one."""

    dispatch: dict[int, Any] = {}
    # Set by pickle._Unpickler.load() (declared for the type checker only).
    stack: list[Any]
    append: Callable[[Any], None]

    def find_class(self, module: str, name: str) -> Any:
        found = _allow_lists()[0].get((module, name))
        if found is None:
            raise _Refused(f"it refers to {module}.{name}")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it uses a persistent id")

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        check = _allow_lists()[2].get(func) if _hashable(func) else None
        if check is None or not isinstance(args, tuple) or not check(args):
            raise _Refused(f"it calls {_describe(func)} with {_describe(args)}")
        self.stack[-1] = func(*args)

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if not (_hashable(cls) and cls in _allow_lists()[1]) or args != ():
            raise _Refused(f"it creates {_describe(cls)} with {_describe(args)}")
        self.append(cls.__new__(cls))

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        cls = type(inst)
        if cls not in _allow_lists()[1]:
            raise _Refused(f"it fills in a {_describe(inst)}")
        if "__setstate__" in vars(cls):  # TensorProperties: a 5-tuple of plain values
            if not isinstance(state, tuple):
                raise _Refused(f"it gives {cls.__name__} the state {_describe(state)}")
            inst.__setstate__(state)
            return
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        fields = getattr(cls, "__dataclass_fields__", {})
        if not isinstance(state, dict) or not all(isinstance(k, str) and k in fields for k in state):
            raise _Refused(f"it sets attributes {_describe(state)} on {cls.__name__}")
        inst.__dict__.update(state)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _describe(value: Any) -> str:
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    text = repr(value) if not callable(value) else getattr(value, "__qualname__", type(value).__name__)
    return text if len(text) <= 80 else text[:77] + "..."


class _RefusingTable(dict):
    """An opcode table whose missing entries (INST, OBJ, NEWOBJ_EX, EXT*, PERSID, buffers, ...) refuse."""

    def __missing__(self, code: int) -> Any:
        import pickletools

        names = {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes}
        raise _Refused(f"it uses the pickle opcode {names.get(code, hex(code))}")


def _build_dispatch() -> None:
    base = pickle._Unpickler.dispatch  # type: ignore[attr-defined]
    table = _RefusingTable({code: base[code] for code in _DATA_OPCODES})
    table[_opcode("GLOBAL")] = base[_opcode("GLOBAL")]
    table[_opcode("STACK_GLOBAL")] = base[_opcode("STACK_GLOBAL")]
    table[_opcode("REDUCE")] = _MetadataUnpickler.load_reduce
    table[_opcode("NEWOBJ")] = _MetadataUnpickler.load_newobj
    table[_opcode("BUILD")] = _MetadataUnpickler.load_build
    _MetadataUnpickler.dispatch = table


_build_dispatch()


def unpickle_dcp_metadata(data: bytes, path: Path) -> Any:
    """The DCP ``Metadata`` pickled in ``data`` (read from ``path``), built by the restricted unpickler and checked
    for its structure and declared sizes; `MetadataRefused` naming ``path`` for anything else (nothing is
    executed). `fabricx.checkpoint.safe_read.read_dcp_metadata` reads the file and checks it against its storage.

    Example:
        ```python
        metadata = unpickle_dcp_metadata(Path("ckpt/.metadata").read_bytes(), Path("ckpt/.metadata"))
        sorted(metadata.state_dict_metadata)
        ```
    """
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except _Refused as refusal:
        raise MetadataRefused(
            f"Refusing to read {path}: {refusal}, which a torch.distributed.checkpoint metadata file never "
            "needs. Nothing was executed. The file is damaged or was crafted to run code."
        ) from None
    except RecursionError:
        raise MetadataRefused(f"Cannot read {path}: it is nested too deeply.") from None
    except (Exception, pickle.UnpicklingError) as error:
        raise MetadataRefused(
            f"Cannot read {path} (truncated or damaged?): {type(error).__name__}: {str(error)[:200]}"
        ) from None
    if type(metadata) is not Metadata:
        raise MetadataRefused(
            f"{path} is not a torch.distributed.checkpoint metadata file: it holds a {_describe(type(metadata))}."
        )
    _check_structure(path, metadata, budget=len(data) + 16)
    return metadata


# ------------------------------------------------------------------------------------- structural checks


def _need(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise MetadataRefused(f"{path} is damaged: {message}.")


def _is_int(value: Any, low: int = 0) -> TypeGuard[int]:
    return type(value) is int and value >= low


def _dims(value: Any) -> bool:
    return isinstance(value, torch.Size) and len(value) <= _MAX_DIMS and all(_is_int(d) for d in value)


class _Budget:
    """Counts the work of walking the metadata, so shared references cannot make it explode."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.left = path, limit

    def spend(self, amount: int = 1) -> None:
        self.left -= amount
        if self.left < 0:
            raise MetadataRefused(f"{self.path} is damaged: it lists more entries than its size can hold.")


def _check_structure(path: Path, metadata: Any, budget: int) -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )

    work = _Budget(path, budget)
    fields = vars(metadata)
    entries = fields.get("state_dict_metadata")
    _need(type(entries) is dict, path, "state_dict_metadata is not a dict")
    for name, entry in entries.items():
        work.spend()
        _need(isinstance(name, str), path, f"entry name {_describe(name)} is not a str")
        if type(entry) is BytesStorageMetadata:
            continue
        _need(type(entry) is TensorStorageMetadata, path, f"entry {name!r} is a {_describe(type(entry))}")
        props, size, chunks = (vars(entry).get(k) for k in ("properties", "size", "chunks"))
        _need(type(props) is TensorProperties, path, f"entry {name!r} has no tensor properties")
        _need(isinstance(getattr(props, "dtype", None), torch.dtype), path, f"entry {name!r} has no dtype")
        _need(getattr(props, "layout", None) is torch.strided, path, f"entry {name!r} is not a dense tensor")
        _need(_dims(size), path, f"entry {name!r} has size {_describe(size)}")
        _need(type(chunks) is list, path, f"entry {name!r} has no list of chunks")
        for chunk in chunks:
            work.spend(1 + len(size))
            _need(type(chunk) is ChunkStorageMetadata, path, f"entry {name!r} has a bad chunk")
            offsets, sizes = vars(chunk).get("offsets"), vars(chunk).get("sizes")
            _need(
                _dims(offsets) and _dims(sizes) and len(offsets) == len(sizes) == len(size),
                path,
                f"a chunk of {name!r} has offsets {_describe(offsets)} and sizes {_describe(sizes)}",
            )
            _need(
                all(o + n <= s for o, n, s in zip(offsets, sizes, size, strict=True)),
                path,
                f"a chunk of {name!r} reaches past the tensor's size {tuple(size)}",
            )
    storage = fields.get("storage_data")
    _need(type(storage) is dict, path, "storage_data is not a dict")
    for index, info in storage.items():
        work.spend()
        _need(type(index) is MetadataIndex and isinstance(vars(index).get("fqn"), str), path, "bad storage key")
        offset = vars(index).get("offset")
        _need(offset is None or _dims(offset), path, f"storage key of {index.fqn!r} has a bad offset")
        _need(type(info) is _StorageInfo, path, f"storage of {index.fqn!r} is a {_describe(type(info))}")
        values = vars(info)
        _need(isinstance(values.get("relative_path"), str), path, f"storage of {index.fqn!r} names no file")
        _need(
            _is_int(values.get("offset")) and _is_int(values.get("length")),
            path,
            f"storage of {index.fqn!r} has a bad byte range",
        )
        _need(
            not values.get("transform_descriptors"),
            path,
            f"storage of {index.fqn!r} needs stream transforms {_describe(values.get('transform_descriptors'))}, "
            "which fabricx does not apply",
        )
    planner = fields.get("planner_data")
    _need(planner is None or type(planner) is dict, path, "planner_data is not a dict")
    planner_items: dict[Any, Any] = planner or {}
    # Loading builds the lists the key paths index into; a list grows to its largest index. In a real state
    # dict every slot of every list is reached by some key path, so the slots are bounded by the key elements.
    list_lengths: dict[tuple, int] = {}
    key_elements = 0
    for name, keys in planner_items.items():
        work.spend()
        _need(isinstance(name, str) and type(keys) is tuple and 0 < len(keys) <= _MAX_PATH, path, "bad key path")
        work.spend(len(keys))
        key_elements += len(keys)
        _need(
            all(isinstance(k, str) or (_is_int(k) and k < _MAX_LIST_INDEX) for k in keys),
            path,
            f"the key path of {name!r} is {_describe(keys)}",
        )
        for depth, key in enumerate(keys):
            if type(key) is int:
                prefix = keys[:depth]
                list_lengths[prefix] = max(list_lengths.get(prefix, 0), key + 1)
    slots = sum(list_lengths.values())
    _need(
        slots <= key_elements + _LIST_SLACK,
        path,
        f"its key paths declare lists of {slots} slots in all for {key_elements} key elements; a saved state "
        "fills the lists it declares",
    )
    meta = fields.get("storage_meta")
    _need(meta is None or type(meta) is StorageMeta, path, "storage_meta is not a StorageMeta")
    _need(fields.get("version") is None or isinstance(fields["version"], str), path, "version is not a str")
