"""The stand-in optimizer for a ``configure_optimizers`` that returned ``None`` (Lightning trains without one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer


class NoOptimizer(Optimizer):
    """An optimizer over no model parameter: ``step`` only runs the closure, ``zero_grad`` does nothing.

    ``training_step`` and ``backward`` still run each batch and ``global_step`` counts, as in Lightning when
    ``configure_optimizers`` returns ``None``; the module's weights never change.

    Example:
        ```python
        def configure_optimizers(self):
            return None  # the Trainer runs with NoOptimizer() and warns once
        ```
    """

    def __init__(self) -> None:
        # torch refuses an empty parameter list; the placeholder group is dropped at once, so the stand-in
        # holds no parameter (Fabric's setup checks an optimizer's parameters belong to the module).
        super().__init__([torch.zeros(1)], {})
        self.param_groups = []

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        return None  # the stand-in never holds parameters

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None

    def __repr__(self) -> str:
        return "No Optimizer"


__all__ = ["NoOptimizer"]
