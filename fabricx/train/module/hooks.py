"""Finding and calling the hooks a module and its callbacks actually define (looked up once)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.module.current_hook import named_hook
from fabricx.train.module.module import TrainModule
from fabricx.utilities.profilers import profiled

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


class Hooks:
    """Bound hook methods of a module and its callbacks, cached per hook name.

    Hooks a class inherits unchanged from `TrainModule`/`Callback` are skipped, so an
    unused hook costs one empty loop. Each hook found runs as the module's current hook (what ``self.log``
    inside it is checked against, as in Lightning) and is timed by the Trainer's profiler.

    Example:
        ```python
        hooks = Hooks(trainer, module, callbacks)
        hooks.call("on_train_epoch_start")
        ```
    """

    def __init__(self, trainer: Trainer, module: Any, callbacks: Sequence[Any]) -> None:
        self.trainer = trainer
        self.module = module
        self.callbacks = list(callbacks)
        self._callback_cache: dict[tuple[str, bool | None], tuple[Callable[..., Any], ...]] = {}
        self._module_cache: dict[str, Callable[..., Any] | None] = {}
        if isinstance(module, TrainModule):
            # As Lightning: `self.log` inside a callback hook logs through the module.
            for callback in self.callbacks:
                callback.log = module.log
                callback.log_dict = module.log_dict

    def callback_hooks(self, name: str, monitoring: bool | None = None) -> tuple[Callable[..., Any], ...]:
        """Bound ``name`` methods of the callbacks that define it; ``monitoring`` filters by kind."""
        key = (name, monitoring)
        found = self._callback_cache.get(key)
        if found is None:
            methods = []
            for callback in self.callbacks:
                if monitoring is not None and bool(getattr(callback, "_monitoring", False)) != monitoring:
                    continue
                method = getattr(callback, name, None)
                if not callable(method):
                    continue
                # Callback's own empty default (an attribute set on the instance is the user's).
                inherited = getattr(method, "__func__", None) is getattr(Callback, name, None)
                if isinstance(callback, Callback) and inherited:
                    continue
                method = self._profiled(f"[Callback]{type(callback).__name__}.{name}", method)
                methods.append(named_hook(self.module, name, method))
            found = self._callback_cache[key] = tuple(methods)
        return found

    def module_hook(self, name: str) -> Callable[..., Any] | None:
        """The module's bound ``name`` method, or ``None`` when it is TrainModule's empty default."""
        if name in self._module_cache:
            return self._module_cache[name]
        method = getattr(self.module, name, None)
        if not callable(method):
            method = None
        elif isinstance(self.module, TrainModule):
            default = getattr(TrainModule, name, None)
            if default is not None and getattr(method, "__func__", None) is default:
                method = None
        if method is not None:
            method = self._profiled(f"[LightningModule]{type(self.module).__name__}.{name}", method)
            method = named_hook(self.module, name, method)
        self._module_cache[name] = method
        return method

    def _profiled(self, action: str, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` timed as ``action`` by the Trainer's profiler (itself when nothing is profiled)."""
        return profiled(getattr(self.trainer, "profiler", None), action, method)

    def call(self, name: str, *args: Any, monitoring: bool | None = None, module: bool = True, **kwargs: Any) -> Any:
        """Call ``name`` on the callbacks (with trainer and module first), then on the module."""
        trainer, target = self.trainer, self.module
        methods = self.callback_hooks(name, monitoring)
        for method in methods:
            method(trainer, target, *args, **kwargs)
        if methods:  # only a callback defers a write (`CheckpointConnector.after_this_hook`)
            trainer.checkpoint_connector.run_after_hook_writes()
        if module:
            method = self.module_hook(name)
            if method is not None:
                return method(*args, **kwargs)
        return None
