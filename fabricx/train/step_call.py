"""Calling a module's ``*_step`` method through the strategy's wrapped forward.

DDP, FSDP and the precision plugins act on ``forward``: DDP prepares gradient synchronisation, FSDP
gathers shards, mixed precision enters autocast. A ``training_step`` called directly on the user's
module would bypass all of that, so its call is routed through the set-up module's ``forward``
(the same routing ``FabricModule`` applies to ``model.training_step(...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from fabricx.forward_redirect import redirect_through_forward
from fabricx.wrappers import FabricModule

if TYPE_CHECKING:
    from fabricx.strategies.strategy import ManualStepSync, Strategy


def step_caller(
    wrapped: FabricModule, original: nn.Module, name: str, strategy: Strategy | None = None
) -> Callable[..., Any]:
    """A function that runs ``original.<name>(*args)`` as if it were the forward of ``wrapped``.

    When the wrapper would do nothing around ``forward`` (one device, no autocast, no strategy hooks),
    the method itself is returned, so the common case costs nothing. Given the ``strategy``, a
    ``training_step`` under manual optimization (its backwards run inside that forward) is run under the
    strategy's :meth:`~fabricx.strategies.strategy.Strategy.manual_step_sync`.

    Example::

        training_step = step_caller(model, module, "training_step")
        loss = training_step(batch, batch_idx)
    """
    if not wrapped._redirect:
        return getattr(original, name)
    if strategy is not None and name == "training_step" and not getattr(original, "automatic_optimization", True):
        sync = strategy.manual_step_sync(wrapped._forward_module)
        if sync is not None:
            return _synced_step(redirect_through_forward(wrapped.forward, original, name, sync.step_body_done), sync)
    return redirect_through_forward(wrapped.forward, original, name)


def _synced_step(call: Callable[..., Any], sync: ManualStepSync) -> Callable[..., Any]:
    def training_step(*args: Any, **kwargs: Any) -> Any:
        with sync:
            return call(*args, **kwargs)

    training_step.__wrapped__ = call  # type: ignore[attr-defined]
    return training_step
