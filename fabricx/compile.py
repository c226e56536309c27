"""``torch.compile`` under every strategy: the user's compiled model, or ``Fabric(compile=...)``.

A model compiled before ``setup`` is set up uncompiled (so DDP, FSDP2 and DeepSpeed wrap the user's own
module and checkpoint keys carry no ``_orig_mod.``), then compiled again over the strategy's wrapper with
the same backend, mode and options. ``Fabric(compile=True)`` does that for an uncompiled model,
``compile={...}`` passes ``torch.compile`` arguments, and ``compile="regional"`` compiles each repeated
block (the layers of a ``ModuleList``/``Sequential`` of one class) in place, which compiles once per
block type and keeps every key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from torch import nn

from fabricx._compat.dynamo import compile_like, compiled_parts

CompileOption = bool | str | Mapping[str, Any] | None


def check_compile_option(option: CompileOption) -> CompileOption:
    """Validate ``Fabric(compile=...)``: ``None``/``False``, ``True``, ``"regional"`` or ``torch.compile`` kwargs."""
    if option is None or isinstance(option, bool | Mapping):
        return option
    if option == "regional":
        return option
    raise ValueError(
        f"compile={option!r}; allowed are True, False/None, 'regional', or a dict of torch.compile arguments "
        "such as {'mode': 'max-autotune'}."
    )


def split_compiled(module: nn.Module) -> tuple[nn.Module, Any]:
    """The module to set up and the compile context to re-apply (``None`` for an uncompiled module)."""
    parts = compiled_parts(module)
    if parts is None:
        return module, None
    return parts


def compile_forward(forward_module: nn.Module, context: Any, option: CompileOption) -> nn.Module:
    """The module ``FabricModule`` calls: the set-up module, compiled as the user or ``option`` asked."""
    if context is not None:
        return compile_like(forward_module, context)
    if not option:
        return forward_module
    import torch

    kwargs = dict(option) if isinstance(option, Mapping) else {}
    if option == "regional" or kwargs.pop("regional", False):
        compile_repeated_blocks(forward_module, **kwargs)
        return forward_module
    return cast(nn.Module, torch.compile(forward_module, **kwargs))


def compile_repeated_blocks(module: nn.Module, **compile_kwargs: Any) -> int:
    """Compile, in place, every layer of each ``ModuleList``/``Sequential`` whose layers share one class.

    Returns how many blocks were compiled. Example:

    ```python
    # each transformer block; embeddings and head stay eager
    compile_repeated_blocks(gpt)
    ```
    """
    compiled = _compile_blocks_below(module, compile_kwargs)
    if compiled == 0:
        raise ValueError(
            f"compile='regional' found no repeated blocks in {type(module).__name__} (a ModuleList or Sequential "
            "of two or more layers of one class). Use compile=True to compile the whole model."
        )
    return compiled


def _compile_blocks_below(module: nn.Module, compile_kwargs: dict[str, Any]) -> int:
    if isinstance(module, nn.ModuleList | nn.Sequential) and len(module) >= 2:
        classes = {type(layer) for layer in module}
        if len(classes) == 1 and nn.ModuleList not in classes:
            for layer in module:
                if getattr(layer, "_compiled_call_impl", None) is None:
                    layer.compile(**compile_kwargs)
            return len(module)  # nothing inside a compiled block is compiled again
    return sum(_compile_blocks_below(child, compile_kwargs) for child in module.children())
