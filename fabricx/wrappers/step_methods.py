"""Running a module's other methods (``training_step``, ...) through the strategy's wrapped forward.

DDP, FSDP2, DeepSpeed and the mixed-precision plugins act on ``forward``: DDP prepares gradient
averaging, FSDP2 gathers the root's shards, DeepSpeed's engine runs its hooks, autocast is entered.
``model.training_step(batch)`` called on the user's module would skip all of that (under DDP the ranks
silently train different models), so such a call is sent through the set-up module's forward with
the user's ``forward`` swapped for the method for the length of that one call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from fabricx._compat.torch_internals import has_own_forward_hooks

if TYPE_CHECKING:
    from fabricx.precision.precision import Precision
    from fabricx.strategies.strategy import ManualStepSync, Strategy

#: Methods that are always sent through forward (Lightning's step methods).
STEP_METHODS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})

_MISSING = object()


def forward_is_wrapped(forward_module: nn.Module, original: nn.Module, precision: Precision) -> bool:
    """Whether calling ``original``'s methods directly would skip something the strategy or precision does.

    True when the strategy wrapped the module (DDP, a DeepSpeed engine), when precision needs a context
    around forward (autocast), or when the strategy put hooks on the module itself (FSDP2's
    ``fully_shard`` shards in place and gathers the root's parameters in a forward pre-hook).

    Example:
        ```python
        forward_is_wrapped(ddp_module, module, precision)  # True
        ```
    """
    return forward_module is not original or precision.needs_forward_context or has_own_forward_hooks(original)


def redirect_through_forward(
    forward: Callable[..., Any],
    original: nn.Module,
    name: str,
    after_method: Callable[[], None] | None = None,
) -> Callable[..., Any]:
    """A function that runs ``original.<name>(*args)`` as the body of ``forward(*args)``.

    ``forward`` is the set-up module's forward (precision context, then the strategy's wrapper, which
    eventually calls ``original.forward``). For the length of the call ``original.forward`` is replaced
    by a function that puts the real forward back and runs the method, so ``self(x)`` inside the method
    reaches the real forward. Nothing is looked up per call beyond two dictionary operations.
    ``after_method``, if given, runs inside ``forward`` right after the method returned.

    Example:
        ```python
        training_step = redirect_through_forward(model.forward, model.module, "training_step")
        loss = training_step(batch, batch_idx)
        ```
    """
    method = getattr(original, name)
    instance_dict = original.__dict__

    def call(*args: Any, **kwargs: Any) -> Any:
        previous = instance_dict.get("forward", _MISSING)

        def redirected(*inner_args: Any, **inner_kwargs: Any) -> Any:
            _restore(instance_dict, previous)
            if after_method is None:
                return method(*inner_args, **inner_kwargs)
            output = method(*inner_args, **inner_kwargs)
            after_method()
            return output

        instance_dict["forward"] = redirected
        try:
            return forward(*args, **kwargs)
        finally:
            _restore(instance_dict, previous)

    call.__name__ = name
    call.__doc__ = method.__doc__
    call.__wrapped__ = method  # type: ignore[attr-defined]
    return call


def _restore(instance_dict: dict[str, Any], previous: Any) -> None:
    if previous is _MISSING:
        instance_dict.pop("forward", None)
    else:
        instance_dict["forward"] = previous


def guard_direct_call(
    original: nn.Module, name: str, method: Callable[..., Any], checked: set[str]
) -> Callable[..., Any]:
    """``method`` checked once: if it runs a submodule with gradients on, it bypassed the strategy.

    The first call with gradients enabled puts a forward pre-hook on every submodule; a call that ran
    any of them with gradients on raises (mark the method with ``model.mark_forward_method(name)``), a
    call that ran none adds ``name`` to ``checked`` so later lookups return the method itself. Calls under
    ``torch.no_grad()`` are not checked, and layers a method runs under its own ``@torch.no_grad()``
    do not count (no gradient can go unsynchronised); such a method stays checked on later calls.

    Example:
        ```python
        step = guard_direct_call(module, "generate", module.generate, checked)
        ```
    """
    import torch

    from fabricx.utilities.exceptions import FabricxError

    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or name in checked:
            return method(*args, **kwargs)
        ran: list[bool] = []  # per submodule call: whether it ran with gradients on
        handles = [
            m.register_forward_pre_hook(lambda *_: ran.append(torch.is_grad_enabled())) for m in original.modules()
        ]
        try:
            output = method(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()
        if any(ran):
            raise FabricxError(
                f"{type(original).__name__}.{name}() ran the model's layers outside its set-up forward, so the "
                "strategy (DDP gradient averaging, FSDP gathering, DeepSpeed, autocast) was skipped and the "
                f"result would be wrong. Call `model.mark_forward_method({name!r})` after fabric.setup() to send "
                f"{name}() through forward, or call it under torch.no_grad() if it does not train."
            )
        if not ran:
            checked.add(name)
        return output

    call.__name__ = name
    return call


def step_caller(
    wrapped: nn.Module, original: nn.Module, name: str, strategy: Strategy | None = None
) -> Callable[..., Any]:
    """A function that runs `original.<name>(*args)` as if it were the forward of `wrapped` (the Trainer
    calls a module's `*_step` methods this way).

    When the wrapper would do nothing around `forward` (one device, no autocast, no strategy hooks),
    the method itself is returned, so the common case costs nothing. Given the `strategy`, a
    `training_step` under manual optimization (its backwards run inside that forward) is run under the
    strategy's `manual_step_sync()`.

    Example:
        ```python
        training_step = step_caller(model, module, "training_step")
        loss = training_step(batch, batch_idx)
        ```
    """
    # `wrapped` is a FabricModule (not imported here: that module imports this one).
    if not wrapped.__dict__["_redirect"]:
        return getattr(original, name)
    if strategy is not None and name == "training_step" and not getattr(original, "automatic_optimization", True):
        sync = strategy.manual_step_sync(wrapped.get_submodule("_forward_module"))
        if sync is not None:
            return _synced_step(redirect_through_forward(wrapped.forward, original, name, sync.step_body_done), sync)
    return redirect_through_forward(wrapped.forward, original, name)


def _synced_step(call: Callable[..., Any], sync: ManualStepSync) -> Callable[..., Any]:
    def training_step(*args: Any, **kwargs: Any) -> Any:
        with sync:
            return call(*args, **kwargs)

    training_step.__wrapped__ = call  # type: ignore[attr-defined]
    return training_step
