"""`FabricModule`: the user's module after `fabric.setup`, its forward run through the strategy and precision."""

from __future__ import annotations

import inspect
from types import MethodType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fabricx._compat.torch_internals import global_module_hooks
from fabricx.wrappers.step_methods import STEP_METHODS, forward_is_wrapped, guard_direct_call, redirect_through_forward

# Hooks for every module (``torch.nn.modules.module.register_module_*_hook``): torch adds to and removes
# from these dicts in place, so FabricModule.__call__ can check them without a function call.
_GLOBAL_FORWARD_HOOKS, _GLOBAL_FORWARD_PRE_HOOKS, _GLOBAL_BACKWARD_HOOKS, _GLOBAL_BACKWARD_PRE_HOOKS = (
    global_module_hooks()
)

if TYPE_CHECKING:
    from fabricx.precision.precision import Precision


class FabricModule(nn.Module):
    """The user's module after ``fabric.setup``: forward runs under the precision context and
    through the strategy's wrapper (DDP, FSDP, ...); everything else reaches the user's module.

    ``training_step``, ``validation_step``, ``test_step``, ``predict_step`` and any method named with
    `mark_forward_method()` run through that same forward (so DDP averages their gradients). Another
    method that runs the model's layers with gradients on is refused on its first call, since it would
    skip the strategy. ``state_dict()`` keys are the user's own; ``.module`` is the user's module.

    Example:
        ```python
        model = fabric.setup_module(MyNet())
        loss = model.training_step(batch)  # through DDP's forward
        model.my_custom_method()  # passes through
        ```
    """

    def __init__(self, forward_module: nn.Module, precision: Precision, original_module: nn.Module) -> None:
        super().__init__()
        self.__dict__["_forward_call"] = forward_module
        self._modules["_forward_module"] = forward_module  # what nn.Module's __setattr__ does (a property reads it)
        # Stored outside nn.Module's registries so parameters are not listed twice.
        self.__dict__["_original_module"] = original_module
        self.__dict__["_fabricx_unwrapped"] = original_module
        self.__dict__["_precision"] = precision
        self.__dict__["_needs_context"] = precision.needs_forward_context
        self.__dict__["_redirect"] = forward_is_wrapped(forward_module, original_module, precision)
        self.__dict__["_forward_methods"] = set(STEP_METHODS)
        self.__dict__["_redirected_methods"] = {}
        self.__dict__["_checked_methods"] = set()

    @property
    def _forward_module(self) -> nn.Module:
        # Registered as a submodule too (state_dict, .to()); read from __dict__ because nn.Module's
        # __getattr__ path costs a couple of microseconds on every step that needs it.
        return self.__dict__["_forward_call"]

    @property
    def module(self) -> nn.Module:
        return self._original_module

    @property
    def device(self) -> torch.device:
        """The device of the module's first parameter (or buffer); for an empty module, where setup put it."""
        original = self._original_module
        for tensor in original.parameters():
            return tensor.device
        for tensor in original.buffers():
            return tensor.device
        return self.__dict__.get("_fabricx_device", torch.device("cpu"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # nn.Module's call path costs three more Python calls per step; it is only needed when hooks
        # (on this wrapper or global) or ``compile()`` of this wrapper use it. The user's module below
        # still goes through its own full call path.
        state = self.__dict__
        if (
            state["_forward_hooks"]
            or state["_forward_pre_hooks"]
            or state["_backward_hooks"]
            or state["_backward_pre_hooks"]
            or state.get("_compiled_call_impl") is not None
            or _GLOBAL_FORWARD_HOOKS
            or _GLOBAL_FORWARD_PRE_HOOKS
            or _GLOBAL_BACKWARD_HOOKS
            or _GLOBAL_BACKWARD_PRE_HOOKS
        ):
            return super().__call__(*args, **kwargs)
        if not state["_needs_context"]:
            return state["_forward_call"](*args, **kwargs)
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self._needs_context:
            return self._forward_call(*args, **kwargs)
        precision = self._precision
        args, kwargs = precision.convert_input((args, kwargs))
        with precision.forward_context():
            output = self._forward_call(*args, **kwargs)
        return precision.convert_output(output)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self._original_module.load_state_dict(state_dict, strict=strict, assign=assign)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:
        return self._original_module.named_parameters(*args, **kwargs)

    def parameters(self, recurse: bool = True) -> Any:
        return self._original_module.parameters(recurse)

    def mark_forward_method(self, method: MethodType | str) -> None:
        """Send calls of the user's method ``method`` through the strategy's forward, like ``training_step``.

        Example:
            ```python
            model = fabric.setup(MyNet())
            model.mark_forward_method("generate_and_score")
            ```
        """
        if not isinstance(method, (MethodType, str)):
            raise TypeError(f"mark_forward_method() expects a method or its name, got {type(method).__name__}.")
        name = method if isinstance(method, str) else method.__name__
        if name == "forward":
            raise ValueError("forward already runs through the strategy; mark another method.")
        if not isinstance(getattr(self._original_module, name, None), MethodType):
            raise AttributeError(
                f"mark_forward_method({name!r}): {type(self._original_module).__name__} has no method {name!r}."
            )
        self._forward_methods.add(name)
        self._redirected_methods.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        state = self.__dict__
        redirected = state.get("_redirected_methods")
        if redirected is not None:
            function = redirected.get(name)
            if function is not None:
                return function
            if state["_redirect"] and name in state["_forward_methods"]:
                function = redirect_through_forward(self.forward, state["_original_module"], name)
                redirected[name] = function
                return function
        try:
            return super().__getattr__(name)
        except AttributeError:
            original = state["_original_module"]
            attr = getattr(original, name)
        if (
            redirected is not None
            and state["_redirect"]
            and name not in state["_checked_methods"]
            and not name.startswith("_")
            and inspect.ismethod(attr)
            and attr.__self__ is original
        ):
            return guard_direct_call(original, name, attr, state["_checked_methods"])
        return attr

    def __setattr__(self, name: str, value: Any) -> None:
        state = self.__dict__
        original = state.get("_original_module")
        if original is not None and not name.startswith("_") and hasattr(original, name):
            setattr(original, name, value)
            if name in state:
                # An attribute both have (``training``, set by ``train()``/``eval()``): the wrapper's own
                # copy must agree with the user's module, as in Lightning Fabric.
                state[name] = value
        else:
            super().__setattr__(name, value)
            if name == "_forward_module":
                self.__dict__["_forward_call"] = value

    def __repr__(self) -> str:
        return f"FabricModule({self._original_module!r})"
