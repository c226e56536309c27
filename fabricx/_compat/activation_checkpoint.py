"""torch's composable activation checkpointing, which lives in a private package.

``torch.distributed._composable.checkpoint`` is the checkpointing that composes with
``fully_shard`` (FSDP2); torch has no public path to it yet. It is imported here only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def composable_checkpoint() -> Callable[..., Any]:
    """The function that turns on activation checkpointing for one submodule, in place.

    Example:
        ```python
        composable_checkpoint()(model.block)
        ```
    """
    from torch.distributed._composable.checkpoint_activation import checkpoint

    return checkpoint
