"""``dynamo_backend=`` and ``TorchDynamoPlugin`` for the Accelerate adapter, turned into ``Fabric(compile=...)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fabricx.compile import CompileOption

__all__ = ["TorchDynamoPlugin", "compile_option"]

_NO_BACKEND = {"no", "none"}


@dataclass
class TorchDynamoPlugin:
    """Accelerate's ``torch.compile`` settings: ``prepare()`` compiles each model with them.

    ``use_regional_compilation=True`` compiles each repeated block instead of the whole model.

    Example:
        ```python
        accelerator = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor", mode="reduce-overhead"))
        ```
    """

    backend: Any = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def compile_option(dynamo_backend: Any = None, dynamo_plugin: Any = None) -> CompileOption:
    """The ``Fabric(compile=...)`` value for Accelerate's ``dynamo_backend`` string (or ``DynamoBackend``)
    and ``dynamo_plugin`` (this module's `TorchDynamoPlugin` or Accelerate's own).

    Example:
        ```python
        compile_option("inductor")  # {"backend": "inductor"}
        ```
    """
    if dynamo_plugin is not None and dynamo_backend is not None:
        raise ValueError("Give either dynamo_backend or dynamo_plugin, not both; the plugin holds a backend too.")
    if dynamo_plugin is None:
        if dynamo_backend is None:
            return None
        dynamo_plugin = TorchDynamoPlugin(backend=dynamo_backend)
    backend = getattr(dynamo_plugin, "backend", "inductor")
    backend = str(getattr(backend, "value", backend)).lower()  # Accelerate's DynamoBackend enum
    if backend in _NO_BACKEND or getattr(dynamo_plugin, "disable", False):
        return None
    kwargs: dict[str, Any] = {"backend": backend}
    for name in ("mode", "fullgraph", "dynamic", "options"):
        value = getattr(dynamo_plugin, name, None)
        if value is not None and value is not False:
            kwargs[name] = value
    if kwargs.get("mode") == "default":
        del kwargs["mode"]
    if getattr(dynamo_plugin, "use_regional_compilation", False):
        return {"regional": True, **kwargs}
    return kwargs
