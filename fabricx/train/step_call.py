"""Calling a module's ``*_step`` method through the strategy's wrapped forward.

DDP, FSDP and the precision plugins act on ``forward``: DDP prepares gradient synchronisation, FSDP
gathers shards, mixed precision enters autocast. A ``training_step`` called directly on the user's
module would bypass all of that, so its call is routed through the set-up module's ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from fabricx.wrappers import FabricModule


def step_caller(wrapped: FabricModule, original: nn.Module, name: str) -> Callable[..., Any]:
    """A function that runs ``original.<name>(*args)`` as if it were the forward of ``wrapped``.

    When the wrapper would do nothing around ``forward`` (one device, no autocast), the method itself
    is returned, so the common case costs nothing.

    Example::

        training_step = step_caller(model, module, "training_step")
        loss = training_step(batch, batch_idx)
    """
    method = getattr(original, name)
    if wrapped._forward_module is original and not wrapped._needs_context:
        return method
    instance_dict = original.__dict__

    def call(*args: Any, **kwargs: Any) -> Any:
        previous = instance_dict.get("forward", _MISSING)

        def redirected(*inner_args: Any, **inner_kwargs: Any) -> Any:
            # Put the real forward back first, so that self(x) inside the step reaches it.
            _restore(instance_dict, previous)
            return method(*inner_args, **inner_kwargs)

        instance_dict["forward"] = redirected
        try:
            return wrapped(*args, **kwargs)
        finally:
            _restore(instance_dict, previous)

    return call


_MISSING = object()


def _restore(instance_dict: dict[str, Any], previous: Any) -> None:
    if previous is _MISSING:
        instance_dict.pop("forward", None)
    else:
        instance_dict["forward"] = previous
