"""Types for annotating a hand-written training loop: what counts as an optimizer and as a scheduler.

``Optimizable`` and ``Steppable`` are structural (``isinstance`` checks the attributes, not the class), so any
object shaped like a ``torch.optim.Optimizer`` passes, a set-up fabricx optimizer included. ``LRScheduler`` is
torch's scheduler base class (``ReduceLROnPlateau`` is one since torch 2.2).

Example:
    ```python
    from fabricx.utilities.types import LRScheduler, Optimizable

    isinstance(torch.optim.SGD(model.parameters(), lr=0.1), Optimizable)  # True
    isinstance(torch.optim.lr_scheduler.StepLR(optimizer, 1), LRScheduler)  # True
    ```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau


@runtime_checkable
class Steppable(Protocol):
    """Anything with ``step(closure=None)``, the way ``optimizer.step()`` is called."""

    def step(self, closure: Callable[[], Any] | None = ...) -> Any: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """An optimizer's interface: parameter groups, defaults, per-parameter state and a state dict."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: Any

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


__all__ = ["LRScheduler", "Optimizable", "ReduceLROnPlateau", "Steppable"]
