"""What a checkpoint saved inside a gradient-accumulation window needs: the window position and every
rank's accumulated gradients, so the resumed run continues the window bit for bit.

``fabric.save`` adds two reserved entries: the position (shared by all ranks) and each rank's gradients
of the set-up models in the state (per rank; the strategy says where they live: ``param.grad``,
FSDP2's unsharded accumulation buffers). A checkpoint saved at a window boundary after
``zero_grad()`` holds no gradients, so these entries cost nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.contents import reserved_key
from fabricx.utilities.exceptions import FabricxError
from fabricx.wrappers import FabricModule

if TYPE_CHECKING:
    from fabricx.accumulation.state import AccumulationState

POSITION_KEY = reserved_key("accumulation")
GRADIENTS_KEY = reserved_key("gradients")


class WindowPosition:
    """The accumulation counter of ``fabric.accumulate``, plus what the gradients were saved with."""

    def __init__(self, accumulation: AccumulationState, strategy: Any, gradients: WindowGradients) -> None:
        self.accumulation = accumulation
        self.strategy = strategy
        self.gradients = gradients

    def state_dict(self) -> dict[str, Any]:
        acc = self.accumulation
        if acc.counter != 0:
            self.strategy.check_mid_window_save(acc.counter, acc.window_length)
        return {
            "counter": acc.counter,
            "window_length": acc.window_length,
            "sync_gradients": acc.sync_gradients,
            "world_size": self.strategy.world_size,
            "strategy": type(self.strategy).__name__,
            "has_gradients": self.gradients.any_saved(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        here = (self.strategy.world_size, type(self.strategy).__name__)
        saved = (state.get("world_size"), state.get("strategy"))  # unknown: another setup
        # Restored before the gradients (the entries' order): gradients another setup saved are not loaded.
        self.gradients.saved_elsewhere = saved != here
        # At a boundary, left-over gradients are cleared by zero_grad anyway.
        if state.get("counter", 0) != 0 and saved != here:
            # Raised as a FabricxError: the loader wraps it in a CheckpointError that names the file.
            raise FabricxError(
                f"This checkpoint was saved inside a gradient-accumulation window (after micro-batch "
                f"{state.get('counter')} of {state.get('window_length')}) by {saved[1]} on {saved[0]} "
                f"process(es); the accumulated gradients are each process's own, so it resumes exactly only "
                f"with {saved[1]} on {saved[0]} process(es) (here: {here[1]} on {here[0]}). Resume with that "
                "setup, or resume from a checkpoint saved at a window boundary (after optimizer.step())."
            )
        self.accumulation.restore(
            int(state.get("counter", 0)), int(state.get("window_length", 1)), bool(state.get("sync_gradients", True))
        )


class WindowGradients:
    """Each rank's gradients of the set-up models in the state (by state key)."""

    _fabricx_per_rank = True

    def __init__(self, strategy: Any, state: dict[str, Any]) -> None:
        self.strategy = strategy
        self.modules: dict[str, FabricModule] = {}
        for key, value in state.items():
            # An entry standing for a module whose weights were restored already still gets its gradients back.
            module = value if isinstance(value, FabricModule) else getattr(value, "window_gradients_of", None)
            if isinstance(module, FabricModule):
                self.modules[key] = module
        self._saved: dict[str, Any] | None = None
        # Set by `WindowPosition.load_state_dict`: saved at a window boundary by another number of processes or
        # another strategy, the left-over gradients of the last step (the Trainer zeroes them only before the next
        # backward) are stale, and may be sharded for another size: they are not loaded.
        self.saved_elsewhere = False

    def _collect(self) -> dict[str, Any]:
        if self._saved is None:
            collected = {}
            for key, module in self.modules.items():
                grads = self.strategy.get_gradient_state(module._original_module)
                if grads:
                    collected[key] = grads
            self._saved = collected
        return self._saved

    def any_saved(self) -> bool:
        return bool(self._collect())

    def state_dict(self) -> dict[str, Any]:
        saved = self._collect()
        self._saved = None  # the next save collects afresh
        return saved

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.saved_elsewhere:
            return
        for key, module in self.modules.items():
            self.strategy.load_gradient_state(module._original_module, state.get(key) or {})


def window_entries(accumulation: AccumulationState, strategy: Any, state: dict[str, Any]) -> dict[str, Any]:
    """The reserved entries ``fabric.save``/``fabric.load`` add for the accumulation window."""
    gradients = WindowGradients(strategy, state)
    return {POSITION_KEY: WindowPosition(accumulation, strategy, gradients), GRADIENTS_KEY: gradients}


__all__ = ["GRADIENTS_KEY", "POSITION_KEY", "WindowGradients", "WindowPosition", "window_entries"]
