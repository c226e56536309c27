"""Where accumulation windows end: the two `WindowPolicy` rules `AccumulationState.begin` follows.

* `EpochWindows` (``fabric.accumulate``): windows of ``steps`` micro-batches counted from the epoch's start, the
  epoch's last window shorter; the loss is divided by the window's real length.
* `RunningCount` (the Accelerate adapter): Accelerate's ``Accelerator._do_sync``, a running count of micro-batches
  with a boundary at every multiple of ``steps`` and at the loader's end; the adapter divides the loss by
  ``steps`` itself, as Accelerate does, unless ``exact_scaling`` asks for the window's real length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.accumulation.state import AccumulationState


def _window_length(steps: int, loader: Any, epoch_length: int | None) -> int:
    """``steps``, or fewer for the last window of ``loader``'s epoch (``epoch_length`` batches, else its length)."""
    if loader is None:
        return steps
    if epoch_length is None:
        try:
            epoch_length = len(loader)
        except TypeError:  # a loader without a length: every window is whole
            return steps
    remaining = epoch_length - loader.batches_consumed + 1
    return remaining if 0 < remaining < steps else steps


class EpochWindows:
    """Fabric's windows: ``steps`` micro-batches each, the last of the active loader's epoch shorter.

    The epoch's length is ``epoch_length`` when given (a loop that stops an epoch early), else the one the fabricx
    loader measured when its epoch started, else ``len(loader)``.

    Example:
        ```python
        boundary = fabric.accumulation_state.begin(EpochWindows(steps=4))
        ```
    """

    __slots__ = ("epoch_length", "steps")

    def __init__(self, steps: int, epoch_length: int | None = None) -> None:
        self.steps = steps
        self.epoch_length = epoch_length

    def window_length(self, state: AccumulationState) -> int:
        loader = state.active_loader
        # A fabricx loader measured its epoch when it started; other loaders are asked their length.
        length = self.epoch_length if self.epoch_length is not None else getattr(loader, "epoch_batches", None)
        return _window_length(self.steps, loader, length)

    def ends_window(self, counter: int, window_length: int) -> bool:
        return counter >= window_length

    def loss_divisor(self, window_length: int) -> int:
        return window_length


class RunningCount:
    """Accelerate's rule (its ``Accelerator._do_sync``): ``step`` counts micro-batches, a boundary falls at every
    multiple of ``gradient_state.num_steps`` and at the end of the active loader, where ``step`` starts again.

    ``gradient_state`` is Accelerate's kind of ``GradientState`` (``num_steps``, ``sync_with_dataloader``,
    ``active_dataloader``). ``exact_scaling``: `Fabric.backward` divides the loss by the window's real length;
    otherwise by nothing, the caller dividing by ``num_steps`` as Accelerate does.

    Example:
        ```python
        windows = RunningCount(accelerator.gradient_state, exact_scaling=False)
        boundary = fabric.accumulation_state.begin(windows)
        ```
    """

    __slots__ = ("exact_scaling", "gradient_state", "step")

    def __init__(self, gradient_state: Any, exact_scaling: bool) -> None:
        self.gradient_state = gradient_state
        self.exact_scaling = exact_scaling
        #: Micro-batches counted since the last loader end (Accelerate's ``accelerator.step``).
        self.step = 0

    @property
    def steps(self) -> int:
        return self.gradient_state.num_steps

    def _loader(self) -> Any:
        state = self.gradient_state
        return state.active_dataloader if state.sync_with_dataloader else None

    def window_length(self, state: AccumulationState) -> int:
        return _window_length(self.steps, self._loader(), None)

    def ends_window(self, counter: int, window_length: int) -> bool:
        loader = self._loader()
        if loader is not None and loader.end_of_dataloader:
            self.step = 0
            return True
        self.step += 1
        return self.step % self.steps == 0

    def loss_divisor(self, window_length: int) -> int:
        return window_length if self.exact_scaling else 1


__all__ = ["EpochWindows", "RunningCount"]
