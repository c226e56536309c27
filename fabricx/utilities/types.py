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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

#: A file or folder path as the checkpoint and logger APIs take it (Lightning's ``_PATH``).
PathLike = str | Path
#: What ``torch.load(map_location=...)`` and ``load_from_checkpoint(map_location=...)`` take (Lightning's
#: ``_MAP_LOCATION_TYPE``).
_Device = torch.device | str | int
_StorageMap = Callable[[torch.UntypedStorage, str], torch.UntypedStorage | None]
MapLocation = _Device | _StorageMap | dict[_Device, _Device] | None
#: What a ``training_step`` may return (Lightning's ``STEP_OUTPUT``): a loss, a dict with a ``"loss"``, or None.
StepOutput = torch.Tensor | Mapping[str, Any] | None


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


@dataclass
class LRSchedulerConfig:
    """One LR scheduler and when the Trainer steps it (Lightning's `LRSchedulerConfig`, same fields and order).

    ``interval="step"`` steps after every ``frequency``-th optimizer step; ``"epoch"`` after every
    ``frequency``-th epoch. ``monitor`` names the metric a ``ReduceLROnPlateau`` steps with; ``strict=False``
    skips the step (with a warning) when that metric was not logged.

    Example:
        ```python
        config = LRSchedulerConfig(torch.optim.lr_scheduler.StepLR(optimizer, 1), interval="step")
        ```
    """

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


__all__ = [
    "LRScheduler",
    "LRSchedulerConfig",
    "MapLocation",
    "Optimizable",
    "PathLike",
    "ReduceLROnPlateau",
    "Steppable",
]
