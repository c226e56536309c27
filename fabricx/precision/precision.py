"""The base precision plugin: plain float32, and the interface every plugin follows."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer


class Precision:
    """Full float32 precision (``"32-true"``); the base of every precision plugin.

    A plugin converts modules and inputs to its dtype, provides the autocast context around
    ``forward``, and may scale the loss and step the optimizer through a grad scaler.

    Example:
        ```python
        Fabric(precision="32-true")  # or plugins=Precision()
        ```
    """

    precision: str = "32-true"
    #: Whether forward needs a context or input conversion at all (lets wrappers skip both).
    needs_forward_context: bool = False
    #: Whether optimizer steps must go through ``optimizer_step`` (e.g. a grad scaler).
    needs_optimizer_step: bool = False
    #: Whether ``loss.backward()`` called directly would be wrong (the loss must be scaled).
    needs_backward: bool = False

    def convert_module(self, module: Module) -> Module:
        """Convert a module's parameters to this precision's dtype."""
        return module

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        """Context in which new floating-point tensors get this precision's dtype."""
        return contextlib.nullcontext()

    def module_init_context(self) -> contextlib.AbstractContextManager:
        """Context in which a module is built directly in this precision's dtype."""
        return self.tensor_init_context()

    def forward_context(self) -> contextlib.AbstractContextManager:
        """Context around the module's ``forward`` (autocast for mixed precision)."""
        return contextlib.nullcontext()

    def convert_input(self, data: Any) -> Any:
        """Convert floating-point tensors in ``data`` to this precision's input dtype."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Convert floating-point tensors in ``data`` back to the default dtype."""
        return data

    def pre_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Return the tensor to call backward on (scaled under 16-mixed)."""
        return tensor

    def backward(self, tensor: Tensor, model: Module | None, *args: Any, **kwargs: Any) -> None:
        tensor.backward(*args, **kwargs)

    def post_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        return tensor

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        """Step the optimizer (through the grad scaler where there is one)."""
        return optimizer.step(**kwargs)

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Divide gradients by the loss scale so they can be clipped or inspected."""

    def state_dict(self) -> dict[str, Any]:
        """State to store in checkpoints (the grad scaler's)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def teardown(self) -> None:
        """Undo global changes the plugin made."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r})"


class DtypeCastingPrecision(Precision):
    """A precision whose floating inputs are cast to its ``dtype`` and whose outputs go back to the default dtype.

    Example:
        ```python
        class Float16Everything(DtypeCastingPrecision):
            dtype = torch.float16
        ```
    """

    dtype: torch.dtype

    def convert_input(self, data: Any) -> Any:
        return convert_floating_tensors(data, self.dtype)

    def convert_output(self, data: Any) -> Any:
        return convert_floating_tensors(data, torch.get_default_dtype())


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """Temporarily make ``dtype`` the default floating-point dtype."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def convert_floating_tensors(data: Any, dtype: torch.dtype) -> Any:
    """Cast every floating-point tensor in a nested collection to ``dtype``."""
    from lightning_utilities.core.apply_func import apply_to_collection

    def cast(tensor: Tensor) -> Tensor:
        return tensor.to(dtype) if torch.is_floating_point(tensor) else tensor

    return apply_to_collection(data, Tensor, cast)
