"""`FabricOptimizer`: the user's optimizer after `fabric.setup`, stepping through the strategy and precision,
and a set-up scheduler's `step()` held off an accumulation boundary."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch.optim import Optimizer

from fabricx.utilities.identity import Delegating, facade_class, gate_method

if TYPE_CHECKING:
    from fabricx.accumulation.state import AccumulationState
    from fabricx.strategies.strategy import Strategy


class FabricOptimizer(Delegating):
    """The user's optimizer after ``fabric.setup``: still an instance of its class, stepping
    through the strategy and precision (grad scaler, DeepSpeed engine, ...), and doing nothing
    off an accumulation boundary.

    Every attribute other than ``step``/``zero_grad``/``state_dict``/``load_state_dict`` is the
    user's optimizer's own, read and written through (nothing is copied).

    Example:
        ```python
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = fabric.setup(model, optimizer)
        isinstance(optimizer, torch.optim.SGD)  # True
        ```
    """

    # ``step`` is ours too when an LR scheduler built over this wrapper patches it (torch does).
    _OWN = frozenset({"_optimizer", "_strategy", "_accumulation", "_plain_step", "step"})

    def __new__(cls, optimizer: Optimizer, *args: Any, **kwargs: Any) -> FabricOptimizer:
        if isinstance(optimizer, FabricOptimizer):
            from fabricx.utilities.exceptions import SetupError

            raise SetupError(
                "An optimizer should be passed only once to the `setup` method; pass the optimizer you created, "
                "not the one setup() returned."
            )
        return object.__new__(facade_class(FabricOptimizer, type(optimizer)))

    def __init__(self, optimizer: Optimizer, strategy: Strategy, accumulation: AccumulationState) -> None:
        self._bind_target(optimizer)
        self._optimizer = optimizer
        self._strategy = strategy
        self._accumulation = accumulation
        self._plain_step = _step_is_plain(strategy)

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    @property
    def steps_with_closure(self) -> bool:
        """Whether ``step(closure)`` hands the closure to the optimizer's own step (which calls it, as torch's
        optimizers do); ``False`` where a grad scaler or an engine steps instead, which take no closure."""
        return self._plain_step

    # Properties so that the optimizer's own methods, called on this wrapper, see the user's objects.
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self._optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self._optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self._optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self._optimizer.defaults = value

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        if not self._accumulation.sync_gradients:
            return None
        if closure is not None:
            kwargs["closure"] = closure
        if self._plain_step:
            # Looked up per call: an LR scheduler created later patches the user's optimizer's step.
            return self._optimizer.step(**kwargs)
        return self._strategy.optimizer_step(self._optimizer, **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._accumulation.sync_gradients:
            self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._strategy.get_optimizer_state(self._optimizer)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._strategy.load_optimizer_state(self._optimizer, state_dict)

    def __repr__(self) -> str:
        return f"Fabric{self._optimizer!r}"


def _step_is_plain(strategy: Strategy) -> bool:
    """Whether the optimizer's own step is correct (nothing in the strategy or precision intervenes)."""
    from fabricx.strategies.strategy import Strategy as BaseStrategy

    return type(strategy).optimizer_step is BaseStrategy.optimizer_step and not strategy.precision.needs_optimizer_step


def wrap_scheduler_step(scheduler: Any, accumulation: AccumulationState) -> Any:
    """Make ``scheduler.step()`` a no-op off an accumulation boundary.

    The scheduler keeps its class (``isinstance``, pickling) and its ``state_dict`` stays clean.
    """
    return gate_method(scheduler, "step", lambda: accumulation.sync_gradients, tag="fabric_accumulation")
