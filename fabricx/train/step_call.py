"""Calling a module's ``*_step`` method through the strategy's wrapped forward.

DDP, FSDP and the precision plugins act on ``forward``: DDP prepares gradient synchronisation, FSDP
gathers shards, mixed precision enters autocast. A ``training_step`` called directly on the user's
module would bypass all of that, so its call is routed through the set-up module's ``forward``
(the same routing ``FabricModule`` applies to ``model.training_step(...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from fabricx.forward_redirect import redirect_through_forward
from fabricx.wrappers import FabricModule


def step_caller(wrapped: FabricModule, original: nn.Module, name: str) -> Callable[..., Any]:
    """A function that runs ``original.<name>(*args)`` as if it were the forward of ``wrapped``.

    When the wrapper would do nothing around ``forward`` (one device, no autocast, no strategy hooks),
    the method itself is returned, so the common case costs nothing.

    Example::

        training_step = step_caller(model, module, "training_step")
        loss = training_step(batch, batch_idx)
    """
    if not wrapped._redirect:
        return getattr(original, name)
    return redirect_through_forward(wrapped.forward, original, name)
