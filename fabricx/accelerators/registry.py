"""Accelerator names understood by ``Fabric(accelerator=...)``, and the hardware fabricx does not train on."""

from __future__ import annotations

from fabricx.accelerators.accelerator import Accelerator
from fabricx.accelerators.cpu import CPUAccelerator
from fabricx.accelerators.cuda import CUDAAccelerator
from fabricx.accelerators.mps import MPSAccelerator

ACCELERATORS: dict[str, type[Accelerator]] = {
    "cpu": CPUAccelerator,
    "cuda": CUDAAccelerator,
    "gpu": CUDAAccelerator,
    "mps": MPSAccelerator,
}

# "auto" tries these in order.
AUTO_ORDER: tuple[str, ...] = ("cuda", "mps", "cpu")

#: Accelerator names people give that fabricx refuses, with the reason: the one sentence that Fabric, Trainer
#: and `fabricx run` all print (`fabricx env` still reports TPU cores it finds, through XLAAccelerator).
NOT_SUPPORTED: dict[str, str] = {
    "tpu": "fabricx does not support TPU training (it has no XLA strategy and is tested on no TPU)",
}
