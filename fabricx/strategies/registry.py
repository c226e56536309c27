"""Strategy names understood by ``Fabric(strategy=...)``: one line per name.

Entries name a module and class so that a strategy's heavy imports (deepspeed) happen only when
it is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.strategies.strategy import Strategy

# name: (module, class, constructor arguments)
STRATEGIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "single_device": ("fabricx.strategies.single_device", "SingleDeviceStrategy", {}),
    "ddp": ("fabricx.strategies.ddp", "DDPStrategy", {"start_method": "popen"}),
    "ddp_spawn": ("fabricx.strategies.ddp", "DDPStrategy", {"start_method": "spawn"}),
    "ddp_fork": ("fabricx.strategies.ddp", "DDPStrategy", {"start_method": "fork"}),
    "ddp_notebook": ("fabricx.strategies.ddp", "DDPStrategy", {"start_method": "fork"}),
    "ddp_find_unused_parameters_true": (
        "fabricx.strategies.ddp",
        "DDPStrategy",
        {"start_method": "popen", "find_unused_parameters": True},
    ),
    "fsdp": ("fabricx.strategies.fsdp", "FSDPStrategy", {}),
    "fsdp_cpu_offload": ("fabricx.strategies.fsdp", "FSDPStrategy", {"cpu_offload": True}),
    "deepspeed": ("fabricx.strategies.deepspeed.strategy", "DeepSpeedStrategy", {}),
    "deepspeed_stage_1": ("fabricx.strategies.deepspeed.strategy", "DeepSpeedStrategy", {"stage": 1}),
    "deepspeed_stage_2": ("fabricx.strategies.deepspeed.strategy", "DeepSpeedStrategy", {"stage": 2}),
    "deepspeed_stage_2_offload": (
        "fabricx.strategies.deepspeed.strategy",
        "DeepSpeedStrategy",
        {"stage": 2, "offload_optimizer": True},
    ),
    "deepspeed_stage_3": ("fabricx.strategies.deepspeed.strategy", "DeepSpeedStrategy", {"stage": 3}),
    "deepspeed_stage_3_offload": (
        "fabricx.strategies.deepspeed.strategy",
        "DeepSpeedStrategy",
        {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
    ),
}


def available_strategy_names() -> list[str]:
    return sorted(STRATEGIES)


def create_strategy(name: str, **overrides: Any) -> Strategy:
    """Build the strategy registered under ``name``."""
    module_name, class_name, kwargs = STRATEGIES[name]
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**{**kwargs, **overrides})
