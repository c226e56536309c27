"""Automatic mixed precision: ``"16-mixed"`` and ``"bf16-mixed"`` (autocast + grad scaler)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import LBFGS, Optimizer

from fabricx.precision.precision import DtypeCastingPrecision
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError


# Floating inputs arrive in the half dtype, as Lightning Fabric's MixedPrecision casts them; autocast still decides
# each op's dtype (ops it keeps in float32 upcast them again).
class MixedPrecision(DtypeCastingPrecision):
    """Float32 parameters with ``torch.autocast`` around forward; under ``"16-mixed"`` the loss is
    scaled by a ``torch.amp.GradScaler`` that skips steps whose gradients overflowed.

    Works on CUDA and on CPU (``torch.amp.GradScaler("cpu")``).

    Example:
        ```python
        Fabric(accelerator="cpu", precision="bf16-mixed")
        ```
    """

    needs_forward_context = True

    def __init__(
        self, precision: str = "16-mixed", device: str = "cuda", scaler: torch.amp.GradScaler | None = None
    ) -> None:
        if precision not in ("16-mixed", "bf16-mixed"):
            raise MisconfigurationError(f"MixedPrecision takes '16-mixed' or 'bf16-mixed', got {precision!r}.")
        if scaler is not None and precision == "bf16-mixed":
            raise MisconfigurationError(
                "A grad scaler was given with precision='bf16-mixed'; bf16 needs no loss scaling. "
                "Drop the scaler or use '16-mixed'."
            )
        self.precision = precision
        self.device = device
        self.dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
        if precision == "16-mixed" and scaler is None:
            scaler = torch.amp.GradScaler(device)
        self.scaler = scaler
        self.needs_optimizer_step = scaler is not None
        self.needs_backward = scaler is not None
        # Scaled backward calls so far, and the count each optimizer last stepped at: a step with no
        # scaled backward since the previous one means the loss went through loss.backward() directly.
        self._scaled_backwards = 0
        self._stepped_at: dict[int, int] = {}

    def forward_context(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.device, dtype=self.dtype)

    def pre_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        if self.scaler is not None:
            self._scaled_backwards += 1
            return self.scaler.scale(tensor)
        return tensor

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        if self.scaler is None:
            return optimizer.step(**kwargs)
        if isinstance(optimizer, LBFGS):
            raise MisconfigurationError(
                "LBFGS re-evaluates the loss inside step(), which a grad scaler cannot handle. "
                "Use precision='bf16-mixed' or '32-true' with LBFGS."
            )
        self._check_loss_was_scaled(optimizer)
        result = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return result

    def _check_loss_was_scaled(self, optimizer: Optimizer) -> None:
        if self._stepped_at.get(id(optimizer), 0) < self._scaled_backwards:
            self._stepped_at[id(optimizer)] = self._scaled_backwards
            return
        if any(p.grad is not None for group in optimizer.param_groups for p in group["params"]):
            raise FabricxError(
                "optimizer.step() under precision='16-mixed' found gradients but no fabric.backward(loss) "
                "since the last step: the loss was not scaled (loss.backward() called directly?), so "
                "small float16 gradients may have underflowed and inf/NaN checks were skipped. Replace "
                "loss.backward() with fabric.backward(loss)."
            )

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        if self.scaler is None:
            return
        from fabricx._compat.torch_internals import optimizer_unscaled_this_step

        # GradScaler raises if unscale_ runs twice in one step; clipping twice is legitimate.
        if not optimizer_unscaled_this_step(self.scaler, optimizer):
            self.scaler.unscale_(optimizer)

    def state_dict(self) -> dict[str, Any]:
        return {} if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)


__all__ = ["MixedPrecision"]
