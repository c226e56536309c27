"""Whether TorchScript is inspecting a module now: scripting and tracing read every attribute of a module,
and a `fabricx.train.TrainModule`'s ``trainer`` and ``fabric`` then answer ``None`` instead of refusing to be
read outside a run (Lightning's ``LightningModule`` does the same while it scripts or traces itself)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class _Inspection:
    # A count, not a flag: inspections may nest (a traced module that scripts a submodule).
    depth = 0


def jit_inspecting() -> bool:
    """Whether a `jit_inspection()` block is running.

    Example:
        ```python
        with jit_inspection():
            assert jit_inspecting()
        ```
    """
    return _Inspection.depth > 0


@contextlib.contextmanager
def jit_inspection() -> Iterator[None]:
    """Script or trace a module inside this block when it may be a `TrainModule` no Trainer runs.

    Example:
        ```python
        with jit_inspection():
            traced = torch.jit.trace(model, example_input)
        ```
    """
    _Inspection.depth += 1
    try:
        yield
    finally:
        _Inspection.depth -= 1


__all__ = ["jit_inspecting", "jit_inspection"]
