"""What a prepared model answers: under DDP, Accelerate's ``prepare`` returns torch's
``DistributedDataParallel`` itself, so scripts call ``model.no_sync()``, read ``model.module`` or set
``model.require_backward_grad_sync``; in one process it returns the user's module, which has no
``module`` attribute of its own (``hasattr(model, "module")`` is how scripts tell). The adapter's
model answers the same."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from fabricx.utilities.identity import facade_class
from fabricx.wrappers import FabricModule

__all__ = ["answer_as_prepared", "ddp_of"]


def ddp_of(model: Any) -> DistributedDataParallel | None:
    """The ``DistributedDataParallel`` behind a prepared model (``None`` when there is none).

    Example:
        ```python
        ddp = ddp_of(model)
        if ddp is not None:
            ddp.register_comm_hook(state, hook)
        ```
    """
    inner = model.__dict__.get("_forward_call", model) if isinstance(model, FabricModule) else model
    inner = getattr(inner, "_orig_mod", inner)  # under torch.compile
    return inner if isinstance(inner, DistributedDataParallel) else None


class _DDPAnswers:
    """Attributes the user's module lacks are read from (and written to) the DDP wrapper below."""

    def __getattr__(self, name: str) -> Any:
        try:
            return FabricModule.__getattr__(self, name)  # type: ignore[arg-type]
        except AttributeError:
            ddp = ddp_of(self)
            if ddp is None or name.startswith("__"):
                raise
            return getattr(ddp, name)

    def __setattr__(self, name: str, value: Any) -> None:
        original = self.__dict__.get("_original_module")
        ddp = ddp_of(self)
        if original is not None and ddp is not None and not hasattr(original, name) and hasattr(ddp, name):
            setattr(ddp, name, value)
        else:
            FabricModule.__setattr__(self, name, value)  # type: ignore[arg-type]


class _PlainAnswers:
    """``module`` is the user's module's own attribute (usually absent), as on the plain module."""

    @property
    def module(self) -> Any:
        # An AttributeError here sends the lookup to FabricModule.__getattr__, i.e. to the user's module.
        raise AttributeError("module")


def answer_as_prepared(model: nn.Module) -> nn.Module:
    """Make a prepared model answer what Accelerate's prepared model answers: where DDP wraps it, what
    ``DistributedDataParallel`` answers (``module``, ``no_sync()``, ``join()``,
    ``require_backward_grad_sync``, ``device_ids``, ``register_comm_hook``...); otherwise what the
    user's module answers (no ``module`` of its own).

    Example:
        ```python
        model = answer_as_prepared(fabric.setup_module(net))
        with model.no_sync():  # under DDP
            loss.backward()
        ```
    """
    if not isinstance(model, FabricModule) or "_fabricx_accelerate_view" in model.__dict__:
        return model
    answers, tag = (_DDPAnswers, "accelerate-ddp") if ddp_of(model) is not None else (_PlainAnswers, "accelerate")
    if type(model) is FabricModule:
        model.__class__ = facade_class(answers, FabricModule, tag=tag)
        model.__dict__["_fabricx_accelerate_view"] = tag
    return model
