"""Distributed data parallel: a full model copy per process, gradients all-reduced in backward."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel

from fabricx.accelerators.accelerator import Accelerator
from fabricx.precision.precision import Precision
from fabricx.strategies.parallel import ParallelStrategy


class DDPStrategy(ParallelStrategy):
    """``torch.nn.parallel.DistributedDataParallel`` over gloo (CPU) or NCCL (CUDA).

    Registry names: ``"ddp"`` (popen), ``"ddp_spawn"``, ``"ddp_fork"`` / ``"ddp_notebook"`` (fork),
    ``"ddp_find_unused_parameters_true"``.

    Args:
        start_method: ``"popen"`` re-runs the script per rank (like torchrun); ``"spawn"``/``"fork"``
            start processes running the function given to ``fabric.launch``.
        process_group_backend: ``"gloo"``, ``"nccl"``, or ``None``/``"auto"`` for the device's default.
        timeout: how long a collective may wait (a ``timedelta`` or seconds) before the job fails.
        ddp_comm_hook: a DDP communication hook, ``hook(state, bucket) -> Future`` (e.g. torch's
            ``default_hooks.fp16_compress_hook`` or ``powerSGD_hook.powerSGD_hook``), registered on the
            wrapped model as Lightning's ``DDPStrategy`` does (on every device type here, gloo included).
        ddp_comm_state: the hook's state (``powerSGD_hook.PowerSGDState(...)``, ...).
        ddp_comm_wrapper: wraps the hook (e.g. ``default_hooks.fp16_compress_wrapper``).
        **ddp_kwargs: passed to ``DistributedDataParallel`` (``find_unused_parameters``, ``static_graph``,
            ``bucket_cap_mb``, ``gradient_as_bucket_view``...).

    Example::

        Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn", timeout=60))
    """

    strategy_name = "ddp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        precision: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta | float | None = timedelta(minutes=30),
        start_method: str = "popen",
        ddp_comm_state: object | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=cluster_environment,
            precision=precision,
            process_group_backend=process_group_backend,
            timeout=timeout,
            start_method=start_method,
        )
        self._ddp_kwargs = ddp_kwargs
        self._ddp_comm_state = ddp_comm_state
        self._ddp_comm_hook = ddp_comm_hook
        self._ddp_comm_wrapper = ddp_comm_wrapper

    def setup_module(self, module: Module) -> DistributedDataParallel:
        device_ids = [self.root_device.index] if self.root_device.type == "cuda" else None
        wrapped = DistributedDataParallel(module=module, device_ids=device_ids, **self._ddp_kwargs)
        if self._ddp_comm_hook is not None:
            hook = self._ddp_comm_hook
            if self._ddp_comm_wrapper is not None:
                hook = self._ddp_comm_wrapper(hook)
            wrapped.register_comm_hook(state=self._ddp_comm_state, hook=hook)
        return wrapped

    @property
    def ddp_kwargs(self) -> dict[str, Any]:
        """The arguments passed through to ``DistributedDataParallel``."""
        return dict(self._ddp_kwargs)

    def no_backward_sync(self, module: Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """DDP's ``no_sync()``: gradients accumulate locally; the next synced backward averages them all."""
        if not enabled:
            return contextlib.nullcontext()
        if not isinstance(module, DistributedDataParallel):
            raise TypeError(
                "no_backward_sync() under DDP needs the model returned by fabric.setup(); its inner module "
                f"is {type(module).__name__}, not DistributedDataParallel."
            )
        return module.no_sync()
