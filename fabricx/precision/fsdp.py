"""Mixed precision under FSDP2: low-precision compute on float32 sharded parameters."""

from __future__ import annotations

from typing import Any

import torch

from fabricx.precision.amp import MixedPrecision
from fabricx.precision.precision import convert_floating_tensors
from fabricx.utilities.exceptions import MisconfigurationError


class FSDPPrecision(MixedPrecision):
    """``"bf16-mixed"`` / ``"16-mixed"`` for `fabricx.strategies.fsdp.FSDPStrategy`.

    The sharded parameters stay float32 (the optimizer updates float32 master weights); FSDP2
    all-gathers them in the low-precision dtype for forward and backward (``param_dtype``) and
    reduces gradients in float32 (``reduce_dtype``). Autocast stays on around forward as well, so
    operations that autocast keeps in float32 (softmax, norms, losses) are computed in float32.
    ``"16-mixed"`` scales the loss with a ``ShardedGradScaler``, whose inf/NaN check covers all ranks.

    Example:
        ```python
        # builds FSDPPrecision
        Fabric(accelerator="cpu", devices=2, strategy="fsdp", precision="bf16-mixed")
        ```
    """

    def __init__(
        self,
        precision: str = "bf16-mixed",
        device: str = "cuda",
        scaler: torch.amp.GradScaler | None = None,
        reduce_dtype: torch.dtype = torch.float32,
    ) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise MisconfigurationError(
                f"FSDPPrecision takes '16-mixed' or 'bf16-mixed', got {precision!r}. For '32-true', "
                "'bf16-true' or '16-true' use the precision flag; FSDP shards parameters in that dtype."
            )
        if precision == "16-mixed" and scaler is None:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            scaler = ShardedGradScaler(device)
        super().__init__(precision, device=device, scaler=scaler)
        self.reduce_dtype = reduce_dtype

    def convert_input(self, data: Any) -> Any:
        # FSDP2's policy casts forward inputs to param_dtype itself; like Lightning Fabric's FSDPPrecision,
        # floating inputs only need to be float32 here.
        return convert_floating_tensors(data, torch.float32)

    def mixed_precision_policy(self) -> Any:
        """The ``torch.distributed.fsdp.MixedPrecisionPolicy`` FSDP2 applies to every sharded module."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=self.reduce_dtype)


__all__ = ["FSDPPrecision"]
