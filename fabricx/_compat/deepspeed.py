"""DeepSpeed's private names: the engine's elastic ZeRO shard readers, ZeRO-2's gradient partition buffer and the
switches that keep DeepSpeed on CPU from compiling what it does not need. Each is pinned by a test in
tests/_compat/test_private_names.py."""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any


def all_zero_checkpoints(engine: Any, engine_dir: str, tag: str) -> list[dict[str, Any]] | None:
    """Every rank's ZeRO optimizer shard of the engine folder's ``tag`` (``None`` when there is none)."""
    return engine._get_all_zero_checkpoints(engine_dir, tag)


def zero_param_shapes(engine: Any) -> Any:
    """The parameter shapes a ZeRO optimizer's ``load_state_dict(param_shapes=...)`` takes."""
    return engine._get_zero_param_shapes()


def compact_grad_partition_buffer(optimizer: Any, group: int) -> Any:
    """ZeRO-2's flat gradient partition of parameter group ``group`` (``.flat_partition``), built if missing."""
    return optimizer._build_compact_grad_partition_buffer(group)


def avoid_cpu_jit_builds() -> None:
    """Keep DeepSpeed on CPU from compiling code it does not need for correctness.

    * The shared-memory all-reduce op is a C++ extension built on first use (about a minute); gloo does
      the same job, so it is marked unavailable.
    * ZeRO's optimizer checks import DeepSpeed's Muon optimizer, whose module calls ``torch.compile`` at
      import time (several seconds loading the inductor). It is imported once here with eager functions;
      Muon users who imported it themselves keep their compiled version.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if "deepspeed.runtime.zero.muon.muon_optimizer" in sys.modules:
        return
    from deepspeed.runtime import compiler

    original = compiler.compile
    compiler.compile = lambda: compiler.dummy_decorator
    try:
        with contextlib.suppress(ImportError):
            importlib.import_module("deepspeed.runtime.zero.muon.muon_optimizer")
    finally:
        compiler.compile = original
