"""The names ``Fabric(accelerator=, strategy=, precision=)`` accept, as ``Literal`` types.

Generated from the registries by ``python -m tools.gen_flags``; do not edit by hand.
"""

from __future__ import annotations

from typing import Literal

AcceleratorName = Literal[
    "auto",
    "cpu",
    "cuda",
    "gpu",
    "mps",
]

StrategyName = Literal[
    "auto",
    "single_device",
    "ddp",
    "ddp_spawn",
    "ddp_fork",
    "ddp_notebook",
    "ddp_find_unused_parameters_true",
    "fsdp",
    "fsdp_cpu_offload",
    "deepspeed",
    "deepspeed_stage_1",
    "deepspeed_stage_2",
    "deepspeed_stage_2_offload",
    "deepspeed_stage_3",
    "deepspeed_stage_3_offload",
]

PrecisionName = Literal[
    "32",
    "64",
    "16",
    "bf16",
    "32-true",
    "64-true",
    "16-mixed",
    "bf16-mixed",
    "16-true",
    "bf16-true",
    16, 32, 64,
]
