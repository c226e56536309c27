"""Hardware: CPU, CUDA and MPS (TPU cores are detected for ``fabricx env``, not trained on)."""

from fabricx.accelerators.accelerator import Accelerator
from fabricx.accelerators.cpu import CPUAccelerator
from fabricx.accelerators.cuda import CUDAAccelerator
from fabricx.accelerators.mps import MPSAccelerator
from fabricx.accelerators.registry import ACCELERATORS
from fabricx.accelerators.xla import XLAAccelerator

__all__ = [
    "ACCELERATORS",
    "Accelerator",
    "CPUAccelerator",
    "CUDAAccelerator",
    "MPSAccelerator",
    "XLAAccelerator",
]
