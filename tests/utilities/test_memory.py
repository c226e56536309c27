"""`is_out_of_memory` is one answer for the Tuner (Lightning's `is_oom_error`) and the Accelerate adapter
(`should_reduce_batch_size`): an error either peer takes for running out of memory, and nothing else.

Deliberate difference: each peer alone misses some of the other's messages (Lightning's list has no MPS or HPU
message; Accelerate's has no ``CUDA error: out of memory``); fabricx answers yes to both lists in both places.
"""

from __future__ import annotations

import pytest
import torch

from fabricx.compat.accelerate.memory import should_reduce_batch_size
from fabricx.utilities.memory import is_out_of_memory

ERRORS = [
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError("CUDA error: out of memory"),
    RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"),
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous"),
    RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"),
    RuntimeError("FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed"),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 MiB"),
    RuntimeError("Expected all tensors to be on the same device"),
    RuntimeError("out of memory", "two arguments"),
    ValueError("CUDA out of memory."),
    MemoryError("out of memory."),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: f"{type(error).__name__}:{str(error)[:30]}")
def test_out_of_memory_is_what_either_peer_calls_it(error):
    from accelerate.utils.memory import should_reduce_batch_size as accelerates
    from lightning.pytorch.utilities.memory import is_oom_error as lightnings

    either = bool(accelerates(error)) or bool(lightnings(error))
    assert is_out_of_memory(error) is either
    assert should_reduce_batch_size(error) is either
