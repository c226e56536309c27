"""``torch.compile``'s wrapper module, seen through torch's private ``OptimizedModule`` (one place, tested)."""

from __future__ import annotations

import sys
from typing import Any

from torch import nn


def compiled_parts(module: nn.Module) -> tuple[nn.Module, Any] | None:
    """``(original module, compile context)`` of a ``torch.compile(module)`` result; ``None`` for other modules.

    Nothing is imported: a module can only be compiled once ``torch._dynamo`` was imported.
    """
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is None or not isinstance(module, eval_frame.OptimizedModule):
        return None
    compiled: Any = module
    return compiled._orig_mod, compiled.dynamo_ctx


def compile_like(module: nn.Module, context: Any) -> nn.Module:
    """Compile ``module`` with the backend, mode and options of an earlier ``torch.compile`` (its context)."""
    from torch._dynamo.eval_frame import OptimizedModule

    return OptimizedModule(module, context)
