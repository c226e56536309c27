"""The strategy interface: how processes and parameters are laid out."""

from __future__ import annotations

import contextlib
import itertools
import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import Tensor
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.accelerators.accelerator import Accelerator
from fabricx.precision.precision import Precision

if TYPE_CHECKING:
    from fabricx.checkpoint.contents import EntryStorage
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.strategies.launchers.launcher import Launcher
    from fabricx.utilities.types import LRSchedulerConfig  # type only: `import fabricx` does not load the types


class ManualStepSync(Protocol):
    """What keeps gradients in sync while a manual-optimization ``training_step`` runs inside forward.

    Entered around the whole call of the wrapped forward; ``step_body_done()`` is called inside it, right
    after the user's ``training_step`` returned (before the wrapper's own end-of-forward work).
    """

    def __enter__(self) -> None: ...

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None: ...

    def step_body_done(self) -> None: ...


class RunOptimizers(Protocol):
    """What sets a Trainer's optimizers up: its ``run_context`` (`fabricx.train.run_context.RunContext`)."""

    def setup_optimizers(self) -> None: ...


class OptimizerHost(Protocol):
    """What `Strategy.setup_optimizers` is handed: a `fabricx.train.Trainer`."""

    @property
    def run_context(self) -> RunOptimizers: ...


class Strategy(ABC):
    """How work is spread over processes and devices.

    A strategy is handed an `Accelerator`, a `Precision` and (for several processes)
    a cluster environment; it launches processes, wraps modules and optimizers, runs backward and
    optimizer steps, implements collectives, and decides how a checkpoint is laid out on disk.
    Single-process defaults live here; parallel strategies override what differs.

    Example:
        ```python
        from fabricx.strategies import SingleDeviceStrategy
        Fabric(strategy=SingleDeviceStrategy(device="cpu"))
        ```
    """

    #: Name in the strategy registry (set by subclasses).
    strategy_name: str = ""
    #: Whether ``loss.backward()`` cannot replace ``fabric.backward(loss)`` (e.g. DeepSpeed).
    requires_fabric_backward: bool = False
    #: Whether the optimizer must be created after the module was set up (sharding).
    requires_optimizer_after_module: bool = False
    #: Whether the same module may be set up again (the strategy leaves the user's module as it was).
    allows_repeated_module_setup: bool = False
    #: Whether each process holds only a shard of the parameters (what a full copy of the model, as
    #: StochasticWeightAveraging keeps, cannot follow).
    shards_parameters: bool = False
    #: Whether an engine owns the optimizer's param groups (what BaseFinetuning cannot add groups to).
    engine_owns_optimizer: bool = False

    def __init__(self, accelerator: Accelerator | None = None, precision: Precision | None = None) -> None:
        self.accelerator = accelerator
        self._precision = precision
        self._launcher: Launcher | None = None
        self._checkpoint_io: CheckpointIO | None = None
        #: The optimizers a `fabricx.train.Trainer` runs (its `optimizers`, the same list; empty under a plain
        #: Fabric, whose `setup` hands the optimizers back instead). Set by `setup_optimizers()`.
        self.optimizers: list[Optimizer] = []
        #: The LR schedulers of those optimizers and when they step (the Trainer's `lr_scheduler_configs`).
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []

    # -- objects handed in by the connector -------------------------------------------------
    @property
    def precision(self) -> Precision:
        return self._precision if self._precision is not None else Precision()

    @precision.setter
    def precision(self, precision: Precision | None) -> None:
        self._precision = precision

    def build_precision(self, name: str, device_type: str) -> Precision:
        """The precision plugin for a canonical precision name (strategies may substitute their own)."""
        from fabricx.precision.registry import build_precision

        return build_precision(name, device_type)

    def validate_precision(self, precision: Precision) -> None:
        """Refuse a precision plugin this strategy cannot run (clear message)."""

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """Where checkpoints are stored (local files unless ``Fabric(plugins=[...])`` gave another)."""
        io = getattr(self, "_checkpoint_io", None)
        if io is None:
            from fabricx.checkpoint.io import LocalCheckpointIO

            io = self._checkpoint_io = LocalCheckpointIO()
        return io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO | None) -> None:
        self._checkpoint_io = io

    @property
    def launcher(self) -> Launcher | None:
        return self._launcher

    # -- where this process is ----------------------------------------------------------------
    @property
    @abstractmethod
    def root_device(self) -> torch.device:
        """The device this process computes on."""

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    @property
    def num_processes(self) -> int:
        return 1

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def is_distributed(self) -> bool:
        return False

    def _configure_launcher(self) -> None:
        """Choose a launcher for this strategy (single-process strategies need none)."""

    def setup_environment(self) -> None:
        """Prepare devices and, for several processes, the process group."""
        if self.accelerator is not None:
            self.accelerator.setup_device(self.root_device)

    # -- modules and optimizers ---------------------------------------------------------------
    def setup_module_and_optimizers(
        self, module: Module, optimizers: list[Optimizer], scheduler: Any = None
    ) -> tuple[Module, list[Optimizer], Any]:
        """Wrap a module and its optimizers together (strategies that need both at once)."""
        module = self.setup_module(module)
        optimizers = [self.setup_optimizer(optimizer) for optimizer in optimizers]
        return module, optimizers, scheduler

    def setup_optimizers(self, trainer: OptimizerHost) -> None:
        """The optimizers and LR schedulers of the module ``trainer`` runs, created anew by its
        ``configure_optimizers`` and set up on the trainer's Fabric (Lightning's ``Strategy.setup_optimizers``):
        `optimizers` and `lr_scheduler_configs`, the trainer's too, are then the new ones, and training steps them.

        The Trainer sets the optimizers up itself when fit starts; call this from a hook to start over with new
        ones, e.g. after unfreezing layers. The new optimizer steps from the next batch on; called inside an epoch,
        schedulers of an interval the old ones lacked (``"step"``, ``"epoch"``) start stepping with the next epoch.

        Example:
            ```python
            class Unfreeze(Callback):
                def on_train_epoch_start(self, trainer, pl_module):
                    if trainer.current_epoch == 2:
                        pl_module.backbone.requires_grad_(True)
                        trainer.strategy.setup_optimizers(trainer)
            ```
        """
        trainer.run_context.setup_optimizers()

    def setup_module(self, module: Module) -> Module:
        """Wrap the module for this strategy (DDP, FSDP, ...); the identity on one device."""
        return module

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        return optimizer

    def module_to_device(self, module: Module) -> None:
        module.to(self.root_device)

    def module_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Context in which a model is instantiated (device, dtype, and optionally on ``meta``)."""
        stack = contextlib.ExitStack()
        if empty_init:
            stack.enter_context(torch.device("meta"))
        else:
            stack.enter_context(self.root_device)
        stack.enter_context(self.precision.module_init_context())
        return stack

    def tensor_init_context(self) -> contextlib.AbstractContextManager:
        stack = contextlib.ExitStack()
        stack.enter_context(self.root_device)
        stack.enter_context(self.precision.tensor_init_context())
        return stack

    def materialize_module(self, module: Module) -> None:
        """Give real storage to parameters created on the meta device, then reset them."""
        if not has_meta_tensors(module):
            return
        module.to_empty(device=self._materialize_device)
        with torch.no_grad():
            for submodule in module.modules():
                reset = getattr(submodule, "reset_parameters", None)
                if callable(reset):
                    reset()

    @property
    def _materialize_device(self) -> torch.device:
        # Where meta parameters get their storage (FSDP with CPU offload keeps them on the CPU).
        return self.root_device

    # -- data -----------------------------------------------------------------------------------
    def process_dataloader(self, dataloader: Any) -> Any:
        """A last change to a set-up data loader (identity for most strategies)."""
        return dataloader

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas`` and ``rank`` for a distributed sampler, or ``None`` for one process."""
        return None

    # -- backward and steps ---------------------------------------------------------------------
    def backward(self, tensor: Tensor, module: Module | None, *args: Any, **kwargs: Any) -> None:
        precision = self.precision
        tensor = precision.pre_backward(tensor, module)
        precision.backward(tensor, module, *args, **kwargs)
        precision.post_backward(tensor, module)

    def manual_step_sync(self, module: Module) -> ManualStepSync | None:
        """How to keep gradients in sync when a ``training_step`` runs its backwards inside ``module``'s forward.

        ``module`` is what `setup_module()` returned. ``None`` (the default) when nothing is needed:
        only a wrapper that prepares gradient sync at the end of forward (DDP) has something to do.

        Example:
            ```python
            sync = strategy.manual_step_sync(wrapped)  # None for one device
            ```
        """
        return None

    def before_manual_backward(self, loss: Tensor) -> None:
        """Called by ``manual_backward`` before each backward of a manual-optimization step (no-op here)."""

    def optimizer_step(self, optimizer: Optimizer, **kwargs: Any) -> Any:
        return self.precision.optimizer_step(optimizer, **kwargs)

    def no_backward_sync(self, module: Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Context that skips gradient synchronisation in ``backward`` (no-op for one process)."""
        return contextlib.nullcontext()

    def clip_gradients_norm(
        self,
        module: Module,
        optimizer: Optimizer,
        max_norm: float,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> Tensor:
        self.precision.unscale_gradients(optimizer)
        return self._clip_grad_norm(optimizer_parameters(optimizer), max_norm, norm_type, error_if_nonfinite)

    def _clip_grad_norm(
        self, parameters: list[Tensor], max_norm: float, norm_type: float, error_if_nonfinite: bool
    ) -> Tensor:
        # Sharded strategies reduce the norm over their shards instead.
        return clip_grad_norm(parameters, max_norm, norm_type, error_if_nonfinite)

    def clip_gradients_value(self, module: Module, optimizer: Optimizer, clip_val: float) -> None:
        self.precision.unscale_gradients(optimizer)
        torch.nn.utils.clip_grad_value_(optimizer_parameters(optimizer), clip_value=clip_val)

    # -- collectives (identity for one process) -----------------------------------------------------
    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        """Stack each rank's tensor along a new first dimension; one process returns it as it is."""
        return tensor

    def all_reduce(self, tensor: Tensor, group: Any = None, reduce_op: Any = "mean") -> Tensor:
        """Reduce over ranks in place and return ``tensor``; one process leaves it as it is."""
        return tensor

    # -- checkpoints ------------------------------------------------------------------------------
    def get_module_state_dict(self, module: Module) -> dict[str, Any]:
        """The module's full state dict as the user's module would give it."""
        return module.state_dict()

    def load_module_state_dict(self, module: Module, state_dict: dict[str, Any], strict: bool = True) -> Any:
        return module.load_state_dict(state_dict, strict=strict)

    def get_optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state(self, optimizer: Optimizer, state_dict: dict[str, Any]) -> None:
        optimizer.load_state_dict(state_dict)

    def check_mid_window_save(self, counter: int, window_length: int) -> None:
        """Refuse a save after micro-batch ``counter`` of ``window_length`` if it could not resume exactly."""

    def get_gradient_state(self, module: Module) -> dict[str, Any]:
        """This rank's current gradients of ``module`` (for a save inside an accumulation window).

        Parameters without a gradient are left out; DTensor gradients give their local shard.
        """
        return {name: local_tensor(p.grad).detach() for name, p in module.named_parameters() if p.grad is not None}

    def load_gradient_state(self, module: Module, state: dict[str, Any]) -> None:
        """Put gradients from `get_gradient_state()` back; parameters not in ``state`` get none."""
        with torch.no_grad():
            for name, param in module.named_parameters():
                saved = state.get(name)
                if saved is None:
                    param.grad = None
                    continue
                grad = torch.zeros_like(param)
                local_tensor(grad).copy_(saved)
                param.grad = grad

    def checkpoint_storage(self) -> EntryStorage | None:
        """How this strategy stores some entries itself (shards, an engine's files); ``None``: all the
        shared layout. Saving and loading are otherwise the same pipeline for every strategy."""
        return None

    def teardown(self) -> None:
        self.precision.teardown()
        if self.accelerator is not None:
            self.accelerator.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def local_tensor(tensor: Tensor) -> Tensor:
    """This process's part of a DTensor (tensor parallel, FSDP2); any other tensor as it is."""
    to_local = getattr(tensor, "to_local", None)  # a DTensor (tensor parallel, FSDP2) gives its shard
    return cast(Tensor, to_local()) if callable(to_local) else tensor


def clip_grad_norm(
    parameters: list[Tensor], max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = True
) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` with the same result, checking for a non-finite norm on one number.

    torch's own check runs three tensor operations per call (a tenth of a small model's step on CPU);
    reading the norm once is enough.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type=norm_type)
    if error_if_nonfinite and not math.isfinite(total_norm.item()):
        raise RuntimeError(
            f"The total norm of order {float(norm_type)} of the gradients is non-finite ({total_norm.item()}), so they "
            "cannot be clipped. Find the step that produced it (a too high learning rate, a bad batch), or pass "
            "error_if_nonfinite=False to scale the gradients by the non-finite norm anyway."
        )
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def check_reduce_op(reduce_op: Any) -> None:
    """Refuse a ``reduce_op`` for ``all_reduce`` that is neither a name nor a ``torch.distributed.ReduceOp``.

    Example:
        ```python
        check_reduce_op("mean")  # passes; "median" raises ValueError
        ```
    """
    if isinstance(reduce_op, torch.distributed.ReduceOp | torch.distributed.ReduceOp.RedOpType):
        return
    if reduce_op not in ("mean", "avg", "sum", "min", "max"):
        raise ValueError(f"reduce_op={reduce_op!r}; allowed are 'mean', 'sum', 'min', 'max'.")


def optimizer_parameters(optimizer: Optimizer) -> list[Tensor]:
    """Every parameter the optimizer updates, over all its groups."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def has_meta_tensors(module: Module) -> bool:
    """Whether a parameter or buffer of ``module`` is on the meta device (built with ``empty_init``, not yet
    materialized)."""
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))
