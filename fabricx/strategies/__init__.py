"""Strategies: how processes and parameters are laid out (single device, DDP, FSDP2, DeepSpeed, TP)."""

from __future__ import annotations

from fabricx.strategies.registry import STRATEGIES, available_strategy_names
from fabricx.strategies.single_device import SingleDeviceStrategy
from fabricx.strategies.strategy import Strategy
from fabricx.utilities.imports import lazy_attributes

# Parallel strategies import torch.distributed pieces; they load when first named.
_LAZY = {
    "DDPStrategy": "fabricx.strategies.ddp",
    "ParallelStrategy": "fabricx.strategies.parallel",
    "FSDPStrategy": "fabricx.strategies.fsdp",
    "DeepSpeedStrategy": "fabricx.strategies.deepspeed.strategy",
    "ModelParallelStrategy": "fabricx.strategies.model_parallel",
}
__getattr__ = lazy_attributes(__name__, _LAZY)  # also `fabricx.strategies.fsdp` without importing it first

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
