"""Out-of-memory errors a smaller batch can cure, and giving the accelerator's cached memory back: one answer for
the Tuner's batch-size search and the Accelerate adapter's ``find_executable_batch_size``."""

from __future__ import annotations

import gc

import torch

__all__ = ["is_out_of_memory", "release_accelerator_memory"]

# The messages of those errors (Lightning's and Accelerate's lists): CUDA/HIP/XPU, MPS, cuDNN, CPU, HPU.
_OUT_OF_MEMORY = (
    " out of memory.",
    "MPS backend out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed",
)


def is_out_of_memory(exception: BaseException) -> bool:
    """Whether ``exception`` says a device ran out of memory: torch's ``OutOfMemoryError``, or a
    ``RuntimeError`` with one of the out-of-memory messages.

    Example:
        ```python
        is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))  # True
        ```
    """
    if not isinstance(exception, RuntimeError):
        return False
    if type(exception).__name__ == "OutOfMemoryError":
        return True
    if len(exception.args) != 1 or not isinstance(exception.args[0], str):
        return False
    message = exception.args[0]
    return ("CUDA" in message and "out of memory" in message) or any(text in message for text in _OUT_OF_MEMORY)


def release_accelerator_memory() -> None:
    """Collect garbage and empty the CUDA or MPS allocator's cache."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif torch.backends.mps.is_available():
        torch.mps.empty_cache()
