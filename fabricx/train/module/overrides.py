"""Whether a module, data module or callback replaces one of its base class's hooks."""

from __future__ import annotations

from lightning_utilities.core.overrides import is_overridden as _code_differs

from fabricx.wrappers import unwrap


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance``'s class defines its own ``method_name`` instead of ``parent``'s.

    ``parent`` defaults to the fabricx base ``instance`` derives from (`fabricx.train.TrainModule`,
    `fabricx.train.DataModule` or `fabricx.callbacks.Callback`); a module set up by a Fabric is
    looked at through `fabricx.unwrap()`. ``None`` is never overridden. A hook the parent does not have, or an
    instance of none of those bases without ``parent``, raises ``ValueError``.

    Example:
        ```python
        from fabricx.train import is_overridden

        if is_overridden("validation_step", model):
            run_validation()
        ```
    """
    if instance is None:
        return False
    instance = unwrap(instance)
    if parent is None:
        parent = _fabricx_base(instance)
    if getattr(parent, method_name, None) is None:
        raise ValueError(
            f"is_overridden: {parent.__name__} has no method {method_name!r} to override; pass the name of one of "
            f"its hooks, or the class that defines {method_name!r} as parent="
        )
    return _code_differs(method_name, instance, parent)


def _fabricx_base(instance: object) -> type:
    from fabricx.train.callbacks.base import Callback
    from fabricx.train.data.datamodule import DataModule
    from fabricx.train.module.module import TrainModule

    for base in (TrainModule, DataModule, Callback):
        if isinstance(instance, base):
            return base
    raise ValueError(
        f"is_overridden got a {type(instance).__name__}, which derives from none of TrainModule, DataModule and "
        "Callback: pass the base class whose method it may override as parent="
    )
