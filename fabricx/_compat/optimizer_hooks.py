"""torch's private registries of optimizer step pre-hooks.

``Optimizer.register_step_pre_hook`` and ``torch.optim.optimizer.register_optimizer_step_pre_hook`` keep their
hooks in the optimizer's ``_optimizer_step_pre_hooks`` and the module-level ``_global_optimizer_pre_hooks``;
torch offers no public way to ask whether any are registered. The Trainer asks (a pre-hook must run before the
closure, so its presence decides how a step runs); those two private names live here only.
"""

from __future__ import annotations

import torch.optim.optimizer as _optimizer_module
from torch.optim import Optimizer


def has_step_pre_hooks(optimizer: Optimizer) -> bool:
    """Whether a step pre-hook is registered on ``optimizer`` or for every optimizer.

    Example:
        ```python
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: None)
        assert has_step_pre_hooks(optimizer)
        ```
    """
    return bool(optimizer._optimizer_step_pre_hooks or _optimizer_module._global_optimizer_pre_hooks)


__all__ = ["has_step_pre_hooks"]
