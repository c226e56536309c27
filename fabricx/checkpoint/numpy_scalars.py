"""NumPy scalars in ``torch.save`` files, read back without running code.

Lightning keeps hyper-parameters as they were given, and libraries give NumPy scalars (an ``np.int64`` from a
pandas column). ``torch.save`` pickles one as ``numpy._core.multiarray.scalar(dtype, raw_bytes)``, the dtype
as ``numpy.dtype(code, False, True)`` plus a state. `SAFE_GLOBALS` lets the weights-only reader take exactly
that: the names resolve to the checking stand-ins below, never to NumPy's own callables. A dtype must be a
plain bool, integer, float or complex one in NumPy's standard state, the bytes exactly its size; anything else
(an object or structured dtype, any other NumPy name) is refused before NumPy sees it.

Example:

```python
with torch.serialization.safe_globals(SAFE_GLOBALS):
    torch.load("last.ckpt", weights_only=True)["hyper_parameters"]["min_prediction_idx"]  # np.int64(0)
```
"""

from __future__ import annotations

import functools
import sys
from pickle import UnpicklingError
from typing import Any

__all__ = ["SAFE_GLOBALS", "NumpyDtype", "is_numpy_scalar", "numpy_scalar"]

# The codes ``np.dtype(...).__reduce__()`` names for the plain scalar types (platform-sized long double is not one).
_CODES = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"})


class NumpyDtype:
    """A dtype named in a file, checked: what ``numpy.dtype`` stands for while a file is read (only inside a
    NumPy scalar; the reader refuses one left on its own)."""

    __slots__ = ("code", "order")

    def __new__(cls, code: object, align: object = False, copy: object = True) -> NumpyDtype:
        # Checked here, not in __init__: the unpickler's NEWOBJ calls __new__ only.
        if type(code) is not str or code not in _CODES or align is not False or copy is not True:
            raise UnpicklingError(
                f"Unsupported NumPy dtype numpy.dtype({code!r:.40}, {align!r:.10}, {copy!r:.10}): only NumPy's "
                f"plain scalar dtypes ({', '.join(sorted(_CODES))}) are read without running code"
            )
        self = super().__new__(cls)
        self.code, self.order = code, ""
        return self

    def __setstate__(self, state: object) -> None:
        orders = ("|",) if self.code in ("b1", "i1", "u1") else ("<", ">")
        if (
            type(state) is not tuple
            or len(state) != 8
            or type(state[0]) is not int
            or state[0] != 3
            or state[1] not in orders
            or state[2:] != (None, None, None, -1, -1, 0)
        ):
            raise UnpicklingError(f"Unsupported state {state!r:.80} of the NumPy dtype {self.code!r}")
        self.order = state[1]


def numpy_scalar(dtype: object, data: object) -> Any:
    """What ``numpy._core.multiarray.scalar`` stands for while a file is read: a checked dtype and its bytes.

    Example:
        ```python
        numpy_scalar(dtype, b"\\x05\\x00\\x00\\x00\\x00\\x00\\x00\\x00")  # np.int64(5) for a checked "i8" dtype
        ```
    """
    if type(dtype) is not NumpyDtype or not dtype.order:
        raise UnpicklingError(f"Unsupported NumPy scalar of {type(dtype).__name__}: only a checked plain dtype")
    import numpy

    real = numpy.dtype(dtype.code).newbyteorder(dtype.order)
    if type(data) is not bytes or len(data) != real.itemsize or (dtype.code == "b1" and data not in (b"\0", b"\1")):
        raise UnpicklingError(f"Unsupported bytes {data!r:.40} for a NumPy scalar of dtype {dtype.code!r}")
    return numpy.frombuffer(data, dtype=real)[0]


#: Allow-list entries for ``torch.serialization.safe_globals``: the names NumPy 1 and 2 pickle scalars through.
SAFE_GLOBALS: list[Any] = [
    (NumpyDtype, "numpy.dtype"),
    (numpy_scalar, "numpy._core.multiarray.scalar"),
    (numpy_scalar, "numpy.core.multiarray.scalar"),
]


@functools.cache
def _scalar_types(numpy: Any) -> frozenset[type]:
    return frozenset(numpy.dtype(code).type for code in _CODES)


def is_numpy_scalar(value: object) -> bool:
    """Whether ``value`` is a NumPy scalar that `SAFE_GLOBALS` reads back as itself (its exact type).

    Example:
        ```python
        is_numpy_scalar(np.float64(0.5))  # True; np.str_("a") and np.datetime64(0, "s") are False
        ```
    """
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(value) in _scalar_types(numpy)
