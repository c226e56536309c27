"""Accelerator names understood by ``Fabric(accelerator=...)``."""

from __future__ import annotations

from fabricx.accelerators.accelerator import Accelerator
from fabricx.accelerators.cpu import CPUAccelerator
from fabricx.accelerators.cuda import CUDAAccelerator
from fabricx.accelerators.mps import MPSAccelerator
from fabricx.accelerators.xla import XLAAccelerator

ACCELERATORS: dict[str, type[Accelerator]] = {
    "cpu": CPUAccelerator,
    "cuda": CUDAAccelerator,
    "gpu": CUDAAccelerator,
    "mps": MPSAccelerator,
    "tpu": XLAAccelerator,
}

# "auto" tries these in order.
AUTO_ORDER: tuple[str, ...] = ("tpu", "cuda", "mps", "cpu")
