"""Distributed data parallel: a full model copy per process, gradients all-reduced in backward."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
from torch.nn import Module
from torch.nn.parallel import DistributedDataParallel

from fabricx._compat.torch_internals import prepare_ddp_reducer_for_backward
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

    Example:
        ```python
        strategy = DDPStrategy(start_method="spawn", timeout=60)
        Fabric(accelerator="cpu", devices=2, strategy=strategy)
        ```
    """

    strategy_name = "ddp"
    #: The DDP module whose manual-optimization ``training_step`` is running (its backwards prepare the reducer).
    _manual_step_module: DistributedDataParallel | None = None

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
            accelerator, parallel_devices, cluster_environment, precision, process_group_backend, timeout, start_method
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

    def manual_step_sync(self, module: Module) -> _ManualStepSync | None:
        """DDP readies its reducer at the end of forward, too late for backwards run inside ``training_step``.

        The returned context stops DDP's end-of-forward preparation and makes each ``manual_backward``
        prepare the reducer instead (what Lightning's DDP strategy does under manual optimization).

        Example:
            ```python
            with strategy.manual_step_sync(ddp_module):
                ...  # the training_step call through ddp_module's forward
            ```
        """
        if not isinstance(module, DistributedDataParallel):
            return None
        return _ManualStepSync(self, module)

    def before_manual_backward(self, loss: torch.Tensor) -> None:
        module = self._manual_step_module
        if module is None:
            return
        if torch.is_grad_enabled() and module.require_backward_grad_sync:
            # As DDP's own end of forward: the loss is searched for unused parameters only when asked to.
            outputs = [loss] if module.find_unused_parameters and not module.static_graph else []
            module.require_forward_param_sync = True
            prepare_ddp_reducer_for_backward(module, outputs)
        else:  # inside no_sync(): gradients accumulate locally
            module.require_forward_param_sync = False


_UNFINISHED_REDUCTION = "Expected to have finished reduction in the prior iteration"


class _ManualStepSync:
    """For one ``training_step`` call under manual optimization: see ``DDPStrategy.manual_step_sync``."""

    __slots__ = ("_module", "_strategy", "_sync_before")

    def __init__(self, strategy: DDPStrategy, module: DistributedDataParallel) -> None:
        self._strategy = strategy
        self._module = module
        self._sync_before = True

    def __enter__(self) -> None:
        self._sync_before = self._module.require_backward_grad_sync
        self._strategy._manual_step_module = self._module

    def step_body_done(self) -> None:
        # DDP's end of forward would ready the reducer for a backward that never comes: the step ran its own.
        self._module.require_backward_grad_sync = False

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        self._module.require_backward_grad_sync = self._sync_before
        self._strategy._manual_step_module = None
        if isinstance(error, RuntimeError) and _UNFINISHED_REDUCTION in str(error):
            raise RuntimeError(_unused_parameters_message(self._strategy, error)) from error


def _unused_parameters_message(strategy: DDPStrategy, error: RuntimeError) -> str:
    start_method = strategy._start_method
    keep_start = (
        f" (or strategy=DDPStrategy(start_method={start_method!r}, find_unused_parameters=True) to keep "
        f"start_method={start_method!r})"
        if start_method != "popen"
        else ""
    )
    return (
        "The module has parameters that were not used in producing a loss passed to manual_backward in "
        "training_step: DDP with find_unused_parameters=False waits for a gradient of every parameter in each "
        "backward, and the previous backward left some without one (with several optimizers, toggle_optimizer "
        "leaves only one optimizer's parameters in each backward). Enable the detection of "
        f"unused parameters: strategy='ddp_find_unused_parameters_true'{keep_start}, or "
        f"strategy=DDPStrategy(find_unused_parameters=True). DDP said: {_UNFINISHED_REDUCTION}."
    )
