"""The precision plugin used with the DeepSpeed strategy: the engine owns dtypes and loss scaling."""

from __future__ import annotations

import contextlib

import torch
from torch.nn import Module

from fabricx.precision.precision import DtypeCastingPrecision, default_dtype
from fabricx.utilities.exceptions import MisconfigurationError

#: Precisions the DeepSpeed engine can run, and the dtype its model computes in.
DEEPSPEED_PRECISIONS: dict[str, torch.dtype] = {
    "32-true": torch.float32,
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
}


# The engine's model holds fp16/bf16 weights: inputs must match them.
class DeepSpeedPrecision(DtypeCastingPrecision):
    """Precision under DeepSpeed: the engine keeps fp32 master weights and scales the fp16 loss, so this
    plugin only casts inputs to the model's dtype (and outputs back), and builds ``bf16-true`` models
    directly in bfloat16.

    The DeepSpeed strategy turns the precision name into the config's ``fp16``/``bf16`` sections.

    Example:
        ```python
        # uses DeepSpeedPrecision("bf16-mixed")
        Fabric(strategy="deepspeed_stage_2", precision="bf16-mixed")
        ```
    """

    def __init__(self, precision: str = "32-true") -> None:
        if precision not in DEEPSPEED_PRECISIONS:
            raise MisconfigurationError(
                f"precision={precision!r} is not supported with DeepSpeed. Choose one of {list(DEEPSPEED_PRECISIONS)}."
            )
        self.precision = precision
        self.dtype = DEEPSPEED_PRECISIONS[precision]
        self.needs_forward_context = precision != "32-true"

    def convert_module(self, module: Module) -> Module:
        # Mixed precisions: the engine casts the module itself and keeps fp32 master weights.
        if self.precision == "bf16-true":
            return module.to(dtype=self.dtype)
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        if self.precision == "bf16-true":
            return default_dtype(self.dtype)
        return contextlib.nullcontext()

    def forward_context(self) -> contextlib.AbstractContextManager:
        return self.tensor_init_context()


__all__ = ["DEEPSPEED_PRECISIONS", "DeepSpeedPrecision"]
