"""Accelerate's keyword objects the adapter reads (``kwargs_handlers=[...]``): DDP options and
communication hooks, and the profiler; plus ``LocalSGD``. Accelerate's own instances are read the same
way as these (by their fields)."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    import contextlib

    from fabricx.compat.accelerate.config import DistributedType


class AcceleratorLike(Protocol):
    """What the handlers here use of `fabricx.compat.accelerate.Accelerator` (a Protocol: the accelerator
    module imports this one).

    Example:
        ```python
        LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8)
        ```
    """

    @property
    def process_index(self) -> int: ...
    @property
    def distributed_type(self) -> DistributedType: ...
    def wait_for_everyone(self) -> None: ...
    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager: ...
    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager: ...
    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any: ...


__all__ = [
    "DDPCommunicationHookType",
    "DistributedDataParallelKwargs",
    "LocalSGD",
    "ProfileKwargs",
    "comm_hook_options",
    "ddp_options",
    "profile_context",
]

#: The trace file name ``Accelerator.profile()`` writes per process into ``output_trace_dir``.
PROFILE_PATTERN_NAME = "profile_{suffix}.json"


class DDPCommunicationHookType(str, enum.Enum):
    """The DDP communication hooks Accelerate names (``DistributedDataParallelKwargs(comm_hook=...)``).

    Example:
        ```python
        DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.POWER_SGD)
        ```
    """

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


@dataclass
class DistributedDataParallelKwargs:
    """Options of ``torch.nn.parallel.DistributedDataParallel`` for the prepared model, and a
    communication hook (``comm_hook``, optionally wrapped by ``comm_wrapper`` fp16/bf16 compression;
    ``comm_state_option`` are PowerSGD's state options).

    Example:
        ```python
        handler = DistributedDataParallelKwargs(
            find_unused_parameters=True, comm_hook="fp16"
        )
        accelerator = Accelerator(kwargs_handlers=[handler])
        ```
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)


_DDP_FIELDS = ("dim", "broadcast_buffers", "bucket_cap_mb", "find_unused_parameters", "check_reduction")
_DDP_FIELDS += ("gradient_as_bucket_view", "static_graph")
_DDP_DEFAULTS = {f.name: f.default for f in fields(DistributedDataParallelKwargs) if f.name in _DDP_FIELDS}


def ddp_options(handler: Any) -> dict[str, Any]:
    """The ``DistributedDataParallel`` arguments a handler sets (those that differ from the defaults, as
    Accelerate passes them)."""
    options = {name: getattr(handler, name, default) for name, default in _DDP_DEFAULTS.items()}
    return {name: value for name, value in options.items() if value != _DDP_DEFAULTS[name]}


def _hook_type(value: Any) -> DDPCommunicationHookType:
    return DDPCommunicationHookType(str(getattr(value, "value", value)).lower())


def comm_hook_options(handler: Any) -> dict[str, Any]:
    """``DDPStrategy(ddp_comm_hook=..., ddp_comm_state=..., ddp_comm_wrapper=...)`` for a handler's
    ``comm_hook``/``comm_wrapper``/``comm_state_option`` (empty without a hook)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hooks = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
        DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
        DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
    }
    wrappers = {
        DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
        DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
    }
    kind = _hook_type(getattr(handler, "comm_hook", "no"))
    hook = hooks.get(kind)
    if hook is None:
        return {}
    options: dict[str, Any] = {"ddp_comm_hook": hook}
    wrapper = wrappers.get(_hook_type(getattr(handler, "comm_wrapper", "no")))
    if wrapper is not None:
        options["ddp_comm_wrapper"] = wrapper
    if kind in (DDPCommunicationHookType.POWER_SGD, DDPCommunicationHookType.BATCHED_POWER_SGD):
        state_options = dict(getattr(handler, "comm_state_option", {}) or {})
        options["ddp_comm_state"] = powerSGD_hook.PowerSGDState(None, **state_options)
    return options


@dataclass
class ProfileKwargs:
    """What `Accelerator.profile()` records: ``torch.profiler.profile`` options, a ``schedule_option``
    dict for ``torch.profiler.schedule``, and ``output_trace_dir`` for a Chrome trace per process
    (``profile_<process_index>.json``).

    Example:
        ```python
        profile = ProfileKwargs(output_trace_dir="traces")
        accelerator = Accelerator(kwargs_handlers=[profile])
        with accelerator.profile() as prof:
            train_step()
        ```
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def build(self) -> torch.profiler.profile:
        """The ``torch.profiler.profile`` these options describe."""
        return build_profiler(self)


def build_profiler(handler: Any) -> torch.profiler.profile:
    """A ``torch.profiler.profile`` from a `ProfileKwargs` (or Accelerate's)."""
    known = {"cpu": torch.profiler.ProfilerActivity.CPU, "cuda": torch.profiler.ProfilerActivity.CUDA}
    activities = None
    if handler.activities is not None:
        unknown = [a for a in handler.activities if a not in known]
        if unknown:
            raise ValueError(f"Invalid profiler activity: {unknown[0]}. Must be one of {list(known)}.")
        activities = [known[a] for a in handler.activities]
    schedule = None if handler.schedule_option is None else torch.profiler.schedule(**handler.schedule_option)
    return torch.profiler.profile(
        activities=activities,
        schedule=schedule,
        on_trace_ready=handler.on_trace_ready,
        record_shapes=handler.record_shapes,
        profile_memory=handler.profile_memory,
        with_stack=handler.with_stack,
        with_flops=handler.with_flops,
        with_modules=handler.with_modules,
    )


@contextlib.contextmanager
def profile_context(accelerator: AcceleratorLike, handler: Any) -> Generator[torch.profiler.profile, None, None]:
    """Profile the block; with ``output_trace_dir``, each process writes its Chrome trace there after it."""
    import os

    with build_profiler(handler) as profiler:
        yield profiler
    if handler.output_trace_dir is None:
        return
    os.makedirs(handler.output_trace_dir, exist_ok=True)
    name = PROFILE_PATTERN_NAME.format(suffix=accelerator.process_index)
    profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
    accelerator.wait_for_everyone()


class LocalSGD:
    """Local SGD: inside the block each process trains on its own (no gradient sync), and every
    ``local_sgd_steps`` calls of `step()` (and on leaving) the parameters are averaged over the
    processes. Does nothing in one process or with ``enabled=False``.

    Example:
        ```python
        with LocalSGD(
            accelerator=accelerator, model=model, local_sgd_steps=8
        ) as local_sgd:
            for batch in loader:
                ...
                optimizer.step()
                local_sgd.step()
        ```
    """

    def __init__(
        self, accelerator: AcceleratorLike, model: nn.Module, local_sgd_steps: int, enabled: bool = True
    ) -> None:
        from fabricx.compat.accelerate.config import DistributedType

        if accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED, DistributedType.XLA):
            raise NotImplementedError("LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM)")
        self.enabled = enabled and accelerator.distributed_type != DistributedType.NO
        self.num_steps = 0
        if self.enabled:
            self.accelerator = accelerator
            self.model = model
            self.local_sgd_steps = local_sgd_steps

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._average()
            self._no_sync.__exit__(*exc)

    def step(self) -> None:
        """Count one optimizer step; average the parameters every ``local_sgd_steps``."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        self.accelerator.wait_for_everyone()
        with self.accelerator.autocast():
            for param in self.model.parameters():
                param.data = self.accelerator.reduce(param.data, reduction="mean")
