"""Code-free serialization of nested training state.

The structure (dicts, lists, numbers, strings, ...) is written as JSON where every value is a typed
node such as ``{"t": "int", "v": 3}``; tensors and arrays go to one safetensors file next to it.
Loading only ever builds the fixed set of types below, so a checkpoint cannot run code.

Supported values: ``dict`` (keys ``str``/``int``/``float``/``bool``/``None``; ``OrderedDict`` and a
state dict's ``_metadata`` are kept), ``list``, ``tuple``, ``str``, ``bytes``, ``int``, ``float``
(including inf/nan), ``bool``, ``None``, ``torch.Tensor`` (any dtype and device, loaded on CPU;
tensors that share memory are stored once and share memory again after loading), NumPy arrays and
scalars, ``torch.dtype`` and ``torch.Size``.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, TypeGuard

import torch
from safetensors.torch import save_file

from fabricx.checkpoint.safe_read import check_tensors, read_regular, regular_file
from fabricx.checkpoint.safetensors_read import read_safetensors
from fabricx.checkpoint.tensor_views import byte_span, view_key
from fabricx.utilities.exceptions import CheckpointError

__all__ = ["dump", "json_path", "load", "tensors_path"]

_FORMAT = "fabricx-state"
_VERSION = 1
# Dtypes safetensors stores natively; anything else is stored as raw bytes plus its dtype name.
SAFETENSORS_DTYPES = frozenset(
    dtype
    for name in (
        *("float64", "float32", "float16", "bfloat16", "complex64", "float8_e4m3fn", "float8_e5m2"),
        *("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool"),
    )
    if isinstance(dtype := getattr(torch, name, None), torch.dtype)
)
_DTYPES_BY_NAME = {
    str(value).removeprefix("torch."): value for value in vars(torch).values() if isinstance(value, torch.dtype)
}
_INT64_RANGE = (-(2**63), 2**64)
_NUMPY_KINDS = "biufcmMSU"


def json_path(directory: str | os.PathLike[str], stem: str) -> Path:
    """The JSON structure file `dump()` writes for ``stem``."""
    return Path(directory) / f"{stem}.json"


def tensors_path(directory: str | os.PathLike[str], stem: str) -> Path:
    """The safetensors file `dump()` writes for ``stem``."""
    return Path(directory) / f"{stem}.safetensors"


# ----------------------------------------------------------------------------------------------- saving


def _numpy() -> Any:
    # NumPy objects can only exist if numpy was imported, so never pay for importing it here.
    return sys.modules.get("numpy")


def _describe(path: str) -> str:
    return f"state{path}" if path else "the state"


class _Encoder:
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        # Tensors found in the state, grouped by the memory they live in, so shared memory is stored once.
        self._groups: dict[Any, list[tuple[torch.Tensor, dict[str, Any]]]] = {}
        self._active: set[int] = set()

    def encode(self, value: Any, path: str) -> Any:
        if value is None:
            return {"t": "none"}
        np = _numpy()
        # Checked first: numpy's float64 is also a Python float, and its type should survive a round trip.
        if np is not None and isinstance(value, (np.ndarray, np.generic)):
            return self._ndarray(value, path) if isinstance(value, np.ndarray) else self._npscalar(value, path)
        if isinstance(value, bool):
            return {"t": "bool", "v": value}
        if isinstance(value, int):
            return {"t": "int", "v": _encode_int(int(value))}
        if isinstance(value, float):
            return {"t": "float", "v": _encode_float(float(value))}
        if isinstance(value, str):
            return {"t": "str", "v": str(value)}
        if isinstance(value, (bytes, bytearray)):
            return {"t": "bytes", "v": bytes(value).hex()}
        if isinstance(value, torch.Tensor):
            return self._tensor(value, path)
        if isinstance(value, torch.dtype):
            return {"t": "dtype", "v": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Size):
            return {"t": "size", "v": [int(d) for d in value]}
        if isinstance(value, (dict, list, tuple)):
            return self._container(value, path)
        raise CheckpointError(
            f"Cannot save {_describe(path)}: values of type "
            f"{type(value).__module__}.{type(value).__qualname__} are not supported without pickling. "
            "Convert it to a dict/list/tuple of str, int, float, bool, None, torch.Tensor or numpy array "
            "(for an object with state, save `obj.state_dict()`)."
        )

    def _container(self, value: dict | list | tuple, path: str) -> Any:
        if id(value) in self._active:
            raise CheckpointError(f"Cannot save {_describe(path)}: it contains itself (a reference cycle).")
        self._active.add(id(value))
        try:
            if isinstance(value, dict):
                items = []
                for key, item in value.items():
                    if key is not None and not isinstance(key, (str, int, float)):
                        raise CheckpointError(
                            f"Cannot save {_describe(path)}: its key {key!r} has type {type(key).__name__}; "
                            "keys must be str, int, float, bool or None. Convert the key to a str."
                        )
                    items.append([self.encode(key, path), self.encode(item, f"{path}[{key!r}]")])
                node: dict[str, Any] = {"t": "dict", "v": items}
                if isinstance(value, OrderedDict):
                    node["ordered"] = True
                metadata = getattr(value, "_metadata", None)
                if isinstance(metadata, dict):  # what nn.Module.state_dict() attaches (module versions)
                    node["metadata"] = self.encode(metadata, f"{path}._metadata")
                return node
            kind = "list" if isinstance(value, list) else "tuple"
            return {"t": kind, "v": [self.encode(item, f"{path}[{i}]") for i, item in enumerate(value)]}
        finally:
            self._active.discard(id(value))

    def _tensor(self, tensor: torch.Tensor, path: str) -> dict[str, Any]:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise CheckpointError(
                f"Cannot save {_describe(path)}: tensor subclass {type(tensor).__qualname__} is not "
                "supported. Convert it to a plain torch.Tensor first (for a DTensor: `.full_tensor()`)."
            )
        if tensor.layout != torch.strided:
            raise CheckpointError(
                f"Cannot save {_describe(path)}: tensor layout {tensor.layout} is not supported. "
                "Convert it with `.to_dense()` first."
            )
        if tensor.is_quantized:
            raise CheckpointError(
                f"Cannot save {_describe(path)}: quantized tensors ({tensor.dtype}) are not supported. "
                "Save `.dequantize()` and the quantization parameters instead."
            )
        if tensor.device.type == "meta":
            raise CheckpointError(
                f"Cannot save {_describe(path)}: it is a tensor on the meta device and has no data. "
                "Materialize it (e.g. `.to_empty(device=...)` and initialize) before saving."
            )
        tensor = tensor.detach()
        node: dict[str, Any] = {
            "t": "tensor",
            "dtype": _dtype_name(tensor.dtype),
            "shape": list(tensor.shape),
        }
        storage = tensor.untyped_storage()
        if tensor.is_conj() or tensor.is_neg() or storage.nbytes() == 0:
            # Lazy conjugate/negative views cannot be rebuilt from shared bytes; empty ones share nothing.
            group_key: Any = ("own", len(self._groups))
        else:
            group_key = (str(tensor.device), storage.data_ptr())
        self._groups.setdefault(group_key, []).append((tensor, node))
        return node

    def _ndarray(self, array: Any, path: str) -> dict[str, Any]:
        np = _numpy()
        dtype = array.dtype
        if dtype.kind not in _NUMPY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
            raise CheckpointError(
                f"Cannot save {_describe(path)}: numpy arrays of dtype {dtype} would need pickling. "
                "Convert it to a numeric/bool/str array or to a list."
            )
        data = np.ascontiguousarray(array)
        key = f"a{len(self.tensors)}"
        self.tensors[key] = (
            torch.frombuffer(bytearray(data.tobytes()), dtype=torch.uint8)
            if data.nbytes
            else torch.empty(0, dtype=torch.uint8)
        )
        return {"t": "ndarray", "key": key, "dtype": dtype.str, "shape": [int(d) for d in array.shape]}

    def _npscalar(self, scalar: Any, path: str) -> dict[str, Any]:
        dtype = scalar.dtype
        if dtype.kind not in _NUMPY_KINDS or dtype.fields is not None:
            raise CheckpointError(
                f"Cannot save {_describe(path)}: numpy scalar of dtype {dtype} would need pickling. "
                "Convert it with `.item()` first."
            )
        return {"t": "npscalar", "dtype": dtype.str, "v": scalar.tobytes().hex()}

    def finish(self) -> None:
        """Decide how each group of memory-sharing tensors is stored and fill in their nodes."""
        for entries in self._groups.values():
            views: dict[tuple, list[dict[str, Any]]] = {}
            for tensor, node in entries:
                views.setdefault(view_key(tensor), []).append(node)
            if len(views) == 1:
                tensor = entries[0][0]
                plain = tensor.resolve_conj().resolve_neg().to("cpu").contiguous()
                if plain.dtype in SAFETENSORS_DTYPES:
                    key = f"t{len(self.tensors)}"
                    self.tensors[key] = plain
                    for node in views[view_key(tensor)]:
                        node["key"] = key
                    continue
                # Not storable natively: keep the bytes of a packed copy and its dtype.
                entries = [(plain, node) for _, node in entries]
            self._store_span(entries)

    def _store_span(self, entries: list[tuple[torch.Tensor, dict[str, Any]]]) -> None:
        # Different views of the same memory: store the bytes they cover once and rebuild each view on them.
        span = byte_span([tensor for tensor, _ in entries])
        key = f"b{len(self.tensors)}"
        self.tensors[key] = span.data.to("cpu").clone()
        for (tensor, node), offset in zip(entries, span.offsets, strict=True):
            node["t"] = "view"
            node["key"] = key
            node["stride"] = list(tensor.stride())
            node["offset"] = offset


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _encode_int(value: int) -> int | str:
    # JSON readers (and Python's own int parser) limit huge decimal numbers; hex has no such limit.
    if _INT64_RANGE[0] <= value < _INT64_RANGE[1]:
        return value
    return hex(value)


def _encode_float(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def dump(state: Any, directory: str | os.PathLike[str], stem: str) -> None:
    """Write ``state`` as ``<stem>.json`` and ``<stem>.safetensors`` inside ``directory``.

    Raises `CheckpointError` (before writing anything) when the state holds a type that
    cannot be stored without pickling; the message names where it is and what to convert it to.

    Example:
        ```python
        dump({"step": 3, "weights": torch.ones(2)}, "ckpt_dir", "shared")
        ```
    """
    encoder = _Encoder()
    try:
        root = encoder.encode(state, "")
    except RecursionError:
        raise CheckpointError("Cannot save the state: it is nested too deeply.") from None
    encoder.finish()
    document = {"format": _FORMAT, "version": _VERSION, "root": root}
    text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # Tensors first: the JSON file is what makes the pair readable.
    save_file(encoder.tensors, str(tensors_path(directory, stem)), metadata={"format": _FORMAT})
    json_path(directory, stem).write_text(text, encoding="utf-8")
    # safetensors creates its files 0600 whatever the umask; give the pair one mode, the one the user's umask
    # gave the JSON file.
    os.chmod(tensors_path(directory, stem), stat.S_IMODE(json_path(directory, stem).stat().st_mode))


# ---------------------------------------------------------------------------------------------- loading


class _Malformed(Exception):
    """Internal: a problem in the JSON document, turned into a CheckpointError naming the file."""


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise _Malformed(message)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: Any, what: str) -> list[int]:
    _need(
        isinstance(value, list) and all(_is_int(v) and v >= 0 for v in value),
        f"{what} must be a list of ints >= 0",
    )
    return value


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self._tensors = tensors
        self._built: dict[tuple, torch.Tensor] = {}
        self._buffers: dict[str, torch.Tensor] = {}

    def decode(self, node: Any) -> Any:
        _need(
            isinstance(node, dict) and isinstance(node.get("t"), str),
            f"expected a typed node, got {node!r:.80}",
        )
        kind = node["t"]
        handler = getattr(self, f"_node_{kind}", None)
        if handler is None:
            raise _Malformed(f"unknown node type {kind!r}")
        return handler(node)

    def _value(self, node: dict[str, Any]) -> Any:
        _need("v" in node, f"node of type {node['t']!r} has no value")
        return node["v"]

    def _node_none(self, node: dict[str, Any]) -> None:
        return None

    def _node_bool(self, node: dict[str, Any]) -> bool:
        value = self._value(node)
        _need(isinstance(value, bool), "bool node holds a non-bool")
        return value

    def _node_int(self, node: dict[str, Any]) -> int:
        value = self._value(node)
        if isinstance(value, str):
            try:
                return int(value, 16)
            except ValueError:
                raise _Malformed(f"int node holds {value!r:.40}, not a hex number") from None
        _need(_is_int(value), "int node holds a non-int")
        return value

    def _node_float(self, node: dict[str, Any]) -> float:
        value = self._value(node)
        specials = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
        if isinstance(value, str):
            _need(value in specials, f"float node holds {value!r:.40}")
            return specials[value]
        _need(isinstance(value, (int, float)) and not isinstance(value, bool), "float node holds a non-number")
        return float(value)

    def _node_str(self, node: dict[str, Any]) -> str:
        value = self._value(node)
        _need(isinstance(value, str), "str node holds a non-str")
        return value

    def _node_bytes(self, node: dict[str, Any]) -> bytes:
        return _hex(self._value(node))

    def _node_list(self, node: dict[str, Any]) -> list:
        value = self._value(node)
        _need(isinstance(value, list), "list node does not hold a list")
        return [self.decode(item) for item in value]

    def _node_tuple(self, node: dict[str, Any]) -> tuple:
        return tuple(self._node_list(node))

    def _node_dict(self, node: dict[str, Any]) -> dict:
        value = self._value(node)
        _need(isinstance(value, list), "dict node does not hold a list of pairs")
        result: dict = OrderedDict() if node.get("ordered") is True else {}
        for pair in value:
            _need(isinstance(pair, list) and len(pair) == 2, "dict item is not a [key, value] pair")
            key = self.decode(pair[0])
            _need(key is None or isinstance(key, (str, int, float)), f"dict key of type {type(key).__name__}")
            result[key] = self.decode(pair[1])
        if "metadata" in node:
            metadata = self.decode(node["metadata"])
            _need(isinstance(metadata, dict), "dict metadata is not a dict")
            result = OrderedDict(result)
            result._metadata = metadata  # type: ignore[attr-defined]
        return result

    def _node_dtype(self, node: dict[str, Any]) -> torch.dtype:
        return _dtype(self._value(node))

    def _node_size(self, node: dict[str, Any]) -> torch.Size:
        return torch.Size(_int_list(self._value(node), "size node"))

    def _stored(self, node: dict[str, Any]) -> tuple[str, torch.Tensor]:
        key = node.get("key")
        if not isinstance(key, str):
            raise _Malformed(f"{node['t']} node has no tensor key")
        _need(key in self._tensors, f"tensor {key!r} is missing from the safetensors file")
        return key, self._tensors[key]

    def _node_tensor(self, node: dict[str, Any]) -> torch.Tensor:
        key, tensor = self._stored(node)
        dtype = _dtype(node.get("dtype"))
        shape = _int_list(node.get("shape"), "tensor shape")
        _need(
            tensor.dtype == dtype,
            f"tensor {key!r} is {tensor.dtype} in the safetensors file, {dtype} in JSON",
        )
        _need(list(tensor.shape) == shape, f"tensor {key!r} has shape {list(tensor.shape)}, JSON says {shape}")
        return tensor

    def _node_view(self, node: dict[str, Any]) -> torch.Tensor:
        key, raw = self._stored(node)
        dtype = _dtype(node.get("dtype"))
        shape = _int_list(node.get("shape"), "view shape")
        stride = _int_list(node.get("stride"), "view stride")
        offset = node.get("offset")
        if not (_is_int(offset) and offset >= 0):
            raise _Malformed("view offset must be an int >= 0")
        _need(len(stride) == len(shape), "view shape and stride differ in length")
        _need(raw.dtype == torch.uint8 and raw.dim() == 1, f"tensor {key!r} is not a byte buffer")
        cache_key = (key, dtype, tuple(shape), tuple(stride), offset)
        if cache_key in self._built:
            return self._built[cache_key]
        itemsize = torch.empty(0, dtype=dtype).element_size()
        numel = math.prod(shape)
        extent = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
        _need(
            (offset + extent) * itemsize <= raw.numel(),
            f"view of {key!r} reaches past its {raw.numel()} bytes",
        )
        view = torch.empty(0, dtype=dtype)
        view.set_(self._own_buffer(key, raw).untyped_storage(), offset, shape, stride)
        self._built[cache_key] = view
        return view

    def _own_buffer(self, key: str, raw: torch.Tensor) -> torch.Tensor:
        # Views are rebuilt on the buffer's storage from its start, so it must own a whole, aligned storage.
        if key not in self._buffers:
            whole = raw.storage_offset() == 0 and raw.untyped_storage().nbytes() == raw.numel()
            self._buffers[key] = raw if whole and raw.data_ptr() % 64 == 0 else raw.clone()
        return self._buffers[key]

    def _node_ndarray(self, node: dict[str, Any]) -> Any:
        key, raw = self._stored(node)
        np = _import_numpy()
        dtype = _numpy_dtype(np, node.get("dtype"))
        shape = _int_list(node.get("shape"), "array shape")
        _need(raw.dtype == torch.uint8 and raw.dim() == 1, f"array {key!r} is not a byte buffer")
        _need(math.prod(shape) * dtype.itemsize == raw.numel(), f"array {key!r} has the wrong number of bytes")
        return np.frombuffer(raw.numpy().tobytes(), dtype=dtype).reshape(shape).copy()

    def _node_npscalar(self, node: dict[str, Any]) -> Any:
        np = _import_numpy()
        dtype = _numpy_dtype(np, node.get("dtype"))
        data = _hex(self._value(node))
        _need(len(data) == dtype.itemsize, "numpy scalar has the wrong number of bytes")
        return np.frombuffer(data, dtype=dtype)[0]


def _hex(value: Any) -> bytes:
    _need(isinstance(value, str), "bytes node does not hold a hex string")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise _Malformed("bytes node holds an invalid hex string") from None


def _dtype(name: Any) -> torch.dtype:
    _need(isinstance(name, str) and name in _DTYPES_BY_NAME, f"unknown torch dtype {name!r:.40}")
    return _DTYPES_BY_NAME[name]


def _import_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise _Malformed("it holds numpy values but numpy is not installed") from None
    return numpy


def _numpy_dtype(np: Any, name: Any) -> Any:
    _need(isinstance(name, str) and len(name) <= 16, f"invalid numpy dtype {name!r:.40}")
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError):
        raise _Malformed(f"invalid numpy dtype {name!r}") from None
    _need(
        dtype.kind in _NUMPY_KINDS and dtype.fields is None and dtype.subdtype is None,
        f"numpy dtype {name!r} is not allowed",
    )
    return dtype


def load(directory: str | os.PathLike[str], stem: str) -> Any:
    """Read back what `dump()` wrote; tensors come back on CPU, each stored one in fresh memory of its own
    (`fabricx.checkpoint.safetensors_read`). Never executes code.

    Every problem with the files raises `CheckpointError` naming the file.

    Example:
        ```python
        state = load("ckpt_dir", "shared")
        ```
    """
    structure, tensors_file = json_path(directory, stem), tensors_path(directory, stem)
    root = Path(directory)
    data = read_regular(structure, "the checkpoint file", root=root, missing=f"Checkpoint file {structure} is missing.")
    regular_file(tensors_file, "the checkpoint file", root=root, missing=f"Checkpoint file {tensors_file} is missing.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"Cannot read checkpoint file {structure}: {error}") from None
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise CheckpointError(
            f"Checkpoint file {structure} is not valid JSON (truncated or damaged?): {error}"
        ) from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT or "root" not in document:
        raise CheckpointError(f"Checkpoint file {structure} is not a fabricx state file (no '{_FORMAT}' header).")
    version = document.get("version")
    if not _is_int(version) or version > _VERSION or version < 1:
        raise CheckpointError(
            f"Checkpoint file {structure} has state format version {version!r}; this fabricx reads version "
            f"{_VERSION}. Upgrade fabricx to read it."
        )
    tensors = read_safetensors(tensors_file, "the checkpoint file", root=root)
    try:
        value = _Decoder(tensors).decode(document["root"])
    except _Malformed as error:
        raise CheckpointError(f"Checkpoint file {structure} is malformed: {error}.") from None
    except RecursionError:
        raise CheckpointError(f"Checkpoint file {structure} is malformed: it is nested too deeply.") from None
    except Exception as error:  # anything else a crafted file could provoke while rebuilding values
        raise CheckpointError(f"Checkpoint file {structure} is malformed: {type(error).__name__}: {error}") from None
    check_tensors(value, f"Checkpoint file {structure}")
    return value
