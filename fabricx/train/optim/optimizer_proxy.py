"""The optimizer ``self.optimizers()`` returns: steps through the trainer so its hooks and counters run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any, Protocol

import torch

from fabricx._compat.lr_scheduler import STEP_WRAPPED_FLAG
from fabricx._compat.optimizer_hooks import has_step_pre_hooks
from fabricx.wrappers import unwrap


class _RunFlags(Protocol):
    @property
    def automatic(self) -> bool: ...
    @property
    def profiling(self) -> bool: ...


class StepDriver(Protocol):
    """The training step as its optimizers and the run context drive it (`TrainingSteps` is the one): named
    by what it does, so neither of them imports the loops that import them."""

    @property
    def run(self) -> _RunFlags: ...
    def build(self) -> None: ...
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None: ...
    def before_optimizer_step(self, optimizer: LightningOptimizer) -> None: ...
    def manual_optimizer_step(self, step: Callable[[], Any]) -> Any: ...
    def toggled(self, optimizer: LightningOptimizer, sync_grad: bool) -> contextlib.AbstractContextManager[None]: ...

# torch's own optimizers evaluate the closure first thing in `step`, before they read a parameter (LBFGS, which
# evaluates it again, is not one of them). For them the closure can run before `step()` is called: the same work in
# the same order, without torch's closure scaffolding (an `enable_grad` context, more frames) on every step. Each
# class maps to its own `step`: a patched one (a test's mock, a compiled step) is not known to do that.
_CLOSURE_FIRST_STEPS: dict[type, Any] = {
    cls: cls.step
    for cls in (
        torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.Adagrad,
        torch.optim.Adadelta, torch.optim.NAdam, torch.optim.RAdam, torch.optim.RMSprop, torch.optim.Rprop,
        torch.optim.ASGD, torch.optim.SparseAdam,
    )
}


def _closure_first_step(optimizer: Any) -> Any:
    """The class's `step` when it is one of `_CLOSURE_FIRST_STEPS` (as torch's profiling wrapper of it, which the
    first instance installs on the class), else ``None``."""
    own = _CLOSURE_FIRST_STEPS.get(type(optimizer))
    step = type(optimizer).step
    return step if own is not None and (step is own or getattr(step, "__wrapped__", None) is own) else None


class LightningOptimizer:
    """The optimizer ``self.optimizers()`` returns inside a `fabricx.train.TrainModule` (Lightning's name).

    It is still an instance of the user's optimizer class (``isinstance(opt, torch.optim.SGD)`` holds)
    and of ``LightningOptimizer``. ``step(closure)`` steps as Lightning does: the optimizer's own step calls
    the closure, after which ``on_before_optimizer_step`` (callbacks, then module) and the automatic gradient
    clipping run (where a grad scaler or an engine steps, which take no closure, all that runs before the
    step); under manual optimization every ``step()`` counts as one ``global_step``. ``optimizer`` is the
    user's own optimizer; ``param_groups``, ``state`` and ``defaults`` are its own. Built without a trainer
    (``LightningOptimizer(opt)``), ``step`` steps the optimizer directly.

    Example:
        ```python
        opt = self.optimizers()
        self.manual_backward(loss)
        opt.step()
        opt.zero_grad()
        ```
    """

    def __init__(self, optimizer: Any, steps: StepDriver | None = None, index: int = 0) -> None:
        inner = unwrap(optimizer)
        object.__setattr__(self, "_fabric_optimizer", optimizer)
        object.__setattr__(self, "_steps", steps)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_fabricx_unwrapped", inner)
        # Decided once, not per step: whether the optimizer's own step calls the closure (as in Lightning), or
        # the closure runs first because a grad scaler or an engine steps. LBFGS always gets it: it
        # re-evaluates the closure (and a scaler refuses it with a message).
        in_step = bool(getattr(optimizer, "steps_with_closure", False)) or isinstance(inner, torch.optim.LBFGS)
        object.__setattr__(self, "_closure_in_step", in_step)
        object.__setattr__(self, "_closure_first_step", _closure_first_step(inner) if in_step else None)
        object.__setattr__(
            self, "__class__", type("Trainer" + type(inner).__name__, (LightningOptimizer, type(inner)), {})
        )

    @property
    def optimizer(self) -> Any:
        """The user's own optimizer."""
        return self._fabricx_unwrapped

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._fabricx_unwrapped.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._fabricx_unwrapped.param_groups = value

    @property
    def state(self) -> Any:
        return self._fabricx_unwrapped.state

    @property
    def defaults(self) -> dict[str, Any]:
        return self._fabricx_unwrapped.defaults

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_fabric_optimizer"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fabricx_unwrapped, name, value)

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step; the optimizer's own step calls ``closure`` (if given), then the step's hooks run (see the class)."""
        steps = self._steps
        if steps is None:
            if closure is not None and self._closure_in_step:
                return self._fabric_optimizer.step(closure=closure, **kwargs)
            result = closure() if closure is not None else None
            self._fabric_optimizer.step(**kwargs)
            return result
        if self._closure_in_step:
            if self._closure_first_step is not None and steps.run.automatic and self._closure_can_run_first():
                result = closure() if closure is not None else None
                steps.before_optimizer_step(self)
                self._fabric_optimizer.step(**kwargs)
                return result

            def evaluate() -> Any:
                # Each evaluation (LBFGS makes several) runs the step's hooks and clipping after its backward.
                result = closure() if closure is not None else None
                steps.before_optimizer_step(self)
                return result

            if steps.run.automatic:
                return self._fabric_optimizer.step(closure=evaluate, **kwargs)  # the usual step, no extra call

            def step() -> Any:
                return self._fabric_optimizer.step(closure=evaluate, **kwargs)

        else:
            result = closure() if closure is not None else None
            steps.before_optimizer_step(self)

            def step() -> Any:
                self._fabric_optimizer.step(**kwargs)
                return result

        if steps.run.automatic:
            return step()
        return steps.manual_optimizer_step(step)

    def _closure_can_run_first(self) -> bool:
        """Whether running the closure before ``step()`` is the same as the optimizer's step running it: torch's
        own step (or the LR scheduler's tracking wrapper of it), no step pre-hook (it runs before the closure),
        no profiler scope to keep the step in, gradients on (the step would enable them)."""
        inner = self._fabricx_unwrapped
        if type(inner).step is not self._closure_first_step or has_step_pre_hooks(inner):
            return False
        patched = inner.__dict__.get("step")
        if patched is not None and not getattr(patched, STEP_WRAPPED_FLAG, False):
            return False
        steps = self._steps
        return steps is not None and not steps.run.profiling and torch.is_grad_enabled()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero (or drop) the gradients of this optimizer's parameters."""
        self._fabricx_unwrapped.zero_grad(set_to_none=set_to_none)

    def refresh(self) -> None:
        """Kept for Lightning code that calls it; attributes are always read from the optimizer itself."""

    def state_dict(self) -> dict[str, Any]:
        return self._fabric_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fabric_optimizer.load_state_dict(state_dict)

    @contextlib.contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Generator[None, None, None]:
        """Only this optimizer's parameters require grad inside; ``sync_grad=False`` also skips DDP sync.

        Example:
            ```python
            with opt.toggle_model(sync_grad=is_last_micro_batch):
                self.manual_backward(loss)
            ```
        """
        if self._steps is None:
            raise RuntimeError("toggle_model needs the optimizer the Trainer set up: use self.optimizers().")
        with self._steps.toggled(self, sync_grad):
            yield

    def __repr__(self) -> str:
        return f"Trainer{self._fabricx_unwrapped!r}"


#: fabricx's earlier name for `LightningOptimizer`.
TrainerOptimizer = LightningOptimizer

__all__ = ["LightningOptimizer", "StepDriver", "TrainerOptimizer"]
