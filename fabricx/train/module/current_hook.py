"""The hook a module is inside: what ``self.log`` checks its options against (Lightning's ``_current_fx_name``).

Every hook the Trainer calls on a module (or on a callback, for the module it drives) runs with the hook's name
as the module's ``_current_fx_name`` and the previous one restored afterwards, so a ``self.log`` in a hook that
may not log (``setup``, ``configure_optimizers``, ``on_fit_end``...) is refused with Lightning's message, and one
in ``on_train_batch_end`` is recorded under that hook.

Example:
    ```python
    hook = named_hook(module, "on_train_batch_end", module.on_train_batch_end)
    hook(outputs, batch, batch_idx)  # self.log inside it is checked as logged in on_train_batch_end
    ```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The attribute Lightning keeps the running hook's name in (LightningModule code may read it).
CURRENT_HOOK = "_current_fx_name"


def named_hook(module: Any, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run with ``name`` as ``module``'s current hook; ``method`` itself without a module.

    Built once per hook and kept (the hooks cache it): a call costs one extra frame and two dict writes.
    """
    state = getattr(module, "__dict__", None)
    if state is None:
        return method

    def call(*args: Any, **kwargs: Any) -> Any:
        previous = state.get(CURRENT_HOOK)
        state[CURRENT_HOOK] = name
        try:
            return method(*args, **kwargs)
        finally:
            state[CURRENT_HOOK] = previous  # nested hooks (a callback calling a module method) unwind in order

    return call


def call_hook(module: Any, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)`` once, as hook ``name`` of ``module`` (for hooks called once per run)."""
    return named_hook(module, name, method)(*args, **kwargs)


__all__ = ["CURRENT_HOOK", "call_hook", "named_hook"]
