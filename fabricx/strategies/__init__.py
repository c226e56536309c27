"""Strategies: how processes and parameters are laid out (single device, DDP, FSDP2, DeepSpeed, TP)."""

from __future__ import annotations

from typing import Any

from fabricx.strategies.registry import STRATEGIES, available_strategy_names
from fabricx.strategies.single_device import SingleDeviceStrategy
from fabricx.strategies.strategy import Strategy

_LAZY = {
    "DDPStrategy": "fabricx.strategies.ddp",
    "ParallelStrategy": "fabricx.strategies.parallel",
    "FSDPStrategy": "fabricx.strategies.fsdp",
    "DeepSpeedStrategy": "fabricx.strategies.deepspeed.strategy",
    "ModelParallelStrategy": "fabricx.strategies.model_parallel",
}


def __getattr__(name: str) -> Any:
    # Parallel strategies import torch.distributed pieces; load them when first named.
    if name in _LAZY:
        from fabricx.utilities.imports import lazy_import

        return getattr(lazy_import(_LAZY[name]), name)
    from fabricx.utilities.imports import submodule

    module = submodule(__name__, name)  # `fabricx.strategies.fsdp.FSDPStrategy` without importing the module first
    if module is not None:
        return module
    raise AttributeError(f"module 'fabricx.strategies' has no attribute {name!r}")


__all__ = [
    "STRATEGIES",
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "ParallelStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "available_strategy_names",
]
