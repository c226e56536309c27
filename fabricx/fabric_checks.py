"""Argument checks and small helpers of the façade that follow Lightning Fabric's semantics."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor

from fabricx.utilities.exceptions import LaunchError


class _NoFunction:
    """The default of ``launch(function=...)``: tells "not given" apart from an explicit ``None``."""

    def __repr__(self) -> str:
        return "<no function>"


NO_FUNCTION: Any = _NoFunction()


def check_launch_function(function: Any, requires_function: bool, strategy_name: str) -> None:
    """Refuse what ``launch()`` cannot run, with Lightning's exception type (``TypeError``)."""
    if function is NO_FUNCTION:
        if requires_function:
            raise LaunchError(
                f"To spawn processes with strategy={strategy_name!r}, `launch()` needs to be called with a function "
                "that contains the code to launch in processes: fabric.launch(train_fn), where train_fn(fabric, ...) "
                "holds your training code."
            )
        return
    if not callable(function):
        raise LaunchError(
            f"`Fabric.launch(...)` needs to be a callable, but got {function!r}. "
            "HINT: do `.launch(your_fn)` instead of `.launch(your_fn())`."
        )
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return  # builtins and C callables: nothing to check
    if not parameters:
        raise LaunchError(
            f"`Fabric.launch(function={function!r})` needs to take at least one argument: the launcher passes the "
            "Fabric object in, so write `def train(fabric): ...`."
        )


def filter_callback_kwargs(method: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``method`` accepts (all of them if it takes ``**kwargs`` or has no signature)."""
    if not kwargs:
        return kwargs
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {name: value for name, value in kwargs.items() if name in parameters}


def non_scalar_loss(loss: Tensor) -> str:
    """What ``fabric.backward`` says for a loss of several elements (torch: "grad can be implicitly created only
    for scalar outputs"): what was given and how to make it one number."""
    return (
        f"fabric.backward() needs a loss with one element, as loss.backward() does, but was given a tensor of "
        f"shape {tuple(loss.shape)} ({loss.numel()} elements). Reduce it to one number first, e.g. "
        "`fabric.backward(loss.mean())` or `fabric.backward(loss.sum())`, or pass the gradient of every element: "
        "`fabric.backward(loss, torch.ones_like(loss))`."
    )


def scalar_metric(value: Tensor) -> Any:
    """A one-element tensor becomes a Python number; a larger one is refused (``ValueError``)."""
    if value.numel() != 1:
        raise ValueError(
            f"fabric.log()/log_dict() got a tensor of shape {tuple(value.shape)}, but it cannot be converted to a "
            "scalar. Log one value per name (e.g. its .mean()) or each element under its own name."
        )
    return value.item()
