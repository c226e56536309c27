"""Whole-model precisions: ``"64-true"``, ``"16-true"`` and ``"bf16-true"``."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn import Module

from fabricx.precision.precision import DtypeCastingPrecision, default_dtype

#: The `torch.nn.Module` methods that cast a module's floating-point tensors (and no others) to each dtype.
_FLOATING_CASTS = {torch.float64: Module.double, torch.float16: Module.half, torch.bfloat16: Module.bfloat16}


class TrueDtypePrecision(DtypeCastingPrecision):
    """Parameters, inputs and computation all in one dtype (no autocast, no master weights).

    Example:
        ```python
        Fabric(precision="bf16-true")  # parameters become torch.bfloat16
        ```
    """

    needs_forward_context = True

    def __init__(self, dtype: torch.dtype) -> None:
        names = {torch.float64: "64-true", torch.float16: "16-true", torch.bfloat16: "bf16-true"}
        if dtype not in names:
            raise ValueError(f"TrueDtypePrecision supports {list(names)} dtypes, got {dtype}.")
        self.dtype = dtype
        self.precision = names[dtype]

    def convert_module(self, module: Module) -> Module:
        # Floating-point tensors only: ``module.to(dtype)`` would drop the imaginary part of complex buffers.
        return _FLOATING_CASTS[self.dtype](module)

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.dtype)

    def forward_context(self) -> contextlib.AbstractContextManager:
        return default_dtype(self.dtype)


class DoublePrecision(TrueDtypePrecision):
    """``"64-true"``: everything in float64.

    Example:
        ```python
        Fabric(precision="64-true")
        ```
    """

    def __init__(self) -> None:
        super().__init__(torch.float64)

    def convert_output(self, data: Any) -> Any:
        # float64 outputs are what the user asked for; casting down would lose the point of it.
        return data


class HalfPrecision(TrueDtypePrecision):
    """``"16-true"`` or ``"bf16-true"``: everything in a 16-bit dtype.

    Pure float16 with Adam's default ``eps=1e-8`` rounds eps to 0; prefer ``eps>=1e-4`` or bf16.

    Example:
        ```python
        Fabric(precision="bf16-true")
        ```
    """

    def __init__(self, precision: str = "bf16-true") -> None:
        dtypes = {"16-true": torch.float16, "bf16-true": torch.bfloat16}
        if precision not in dtypes:
            raise ValueError(f"HalfPrecision takes one of {list(dtypes)}, got {precision!r}.")
        super().__init__(dtypes[precision])
