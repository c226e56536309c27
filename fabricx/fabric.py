"""The ``Fabric`` façade: one object that runs a user's own loop on any hardware and strategy."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast, overload

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from fabricx.accumulation import AccumulationState, AccumulationWindow
from fabricx.capabilities import HoldsFabric, HoldsFabricOptimizers
from fabricx.checkpoint.contents import reserved_key
from fabricx.compile import CompileOption, check_compile_option, compile_forward, split_compiled
from fabricx.connector import Connector
from fabricx.data.loader import FabricDataLoader, build_stateful_loader
from fabricx.fabric_checks import (
    NO_FUNCTION,
    check_launch_function,
    filter_callback_kwargs,
    non_scalar_loss,
    scalar_metric,
)
from fabricx.precision.precision import Precision
from fabricx.strategies.strategy import Strategy, check_reduce_op, has_meta_tensors, optimizer_parameters
from fabricx.utilities import seed as _seed
from fabricx.utilities.apply import convert_to_tensors, move_data_to_device
from fabricx.utilities.exceptions import FabricxError, SetupError
from fabricx.utilities.iterables import one_or_many
from fabricx.utilities.keywords import suggest_keywords
from fabricx.utilities.preemption import REQUEUE_EXIT_CODE, PreemptionWatcher, resolve_signals
from fabricx.utilities.rank_zero import rank_zero_warn, set_global_rank
from fabricx.utilities.rng import RNGStates
from fabricx.wrappers import FabricModule, FabricOptimizer, unwrap, wrap_scheduler_step

if TYPE_CHECKING:
    import signal

    from torch.distributed import ProcessGroup, ReduceOp

    from fabricx.accelerators.accelerator import Accelerator
    from fabricx.capabilities import IncompatibleKeys, LoggerLike
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.checkpointer import Checkpointer
    from fabricx.checkpoint.manager import CheckpointManager
    from fabricx.connector import Plugin
    from fabricx.flags import AcceleratorName, PrecisionName, StrategyName

# A set-up optimizer is an instance of the user's own optimizer class (a facade class that also subclasses
# FabricOptimizer, see fabricx/wrappers/identity.py), so setup() and setup_optimizers() return the type they were
# given: torch schedulers, `isinstance` and the class's own attributes all type-check. A set-up module is
# not an instance of the user's class (it reaches the user's attributes through `__getattr__`): FabricModule.
_Opt = TypeVar("_Opt", bound=Optimizer)
_Opt2 = TypeVar("_Opt2", bound=Optimizer)
_Sched = TypeVar("_Sched")
# Collectives, to_device and broadcast hand back what they are given (tensors moved, reduced or gathered).
_T = TypeVar("_T")
_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")

_RNG_KEY = reserved_key("rng")
_PRECISION_KEY = reserved_key("precision")


class Fabric:
    """Run your own PyTorch loop on CPU, CUDA or MPS, on one device or many, in any precision.

    Args:
        accelerator: ``"auto"``, ``"cpu"``, ``"cuda"``/``"gpu"``, ``"mps"`` or an Accelerator (not ``"tpu"``).
        strategy: ``"auto"``, a registry name (``"ddp"``, ``"fsdp"``, ``"deepspeed_stage_2"``, ...) or a Strategy.
        devices: ``"auto"``, a count (processes on CPU), a list of indices, ``"0,1"`` or ``-1``.
        num_nodes: how many machines take part.
        precision: ``"32-true"``, ``"64-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"16-true"``, ``"bf16-true"``.
        plugins: a Precision, ClusterEnvironment or checkpoint-I/O object, or a list of them.
        callbacks: objects whose methods `call()` invokes by name.
        loggers: a logger or a list of loggers for `log()` and `log_dict()`.
        grad_accum_steps: micro-batches per optimizer step inside `accumulate()`.
        save_rng_states: store every rank's random generator states in checkpoints and restore them.
        preemption_signals: ``True`` (SIGTERM and SIGUSR1) or a list of signals that a scheduler sends before
            stopping the job; `preemption_requested` then turns true at the next check.
        compile: ``torch.compile`` every set-up model: ``True``, a dict of ``torch.compile`` arguments, or
            ``"regional"`` (each repeated block). A model compiled before `setup()` stays compiled anyway.

    Example:
        ```python
        fabric = Fabric(accelerator="cpu", devices=2, precision="bf16-mixed")
        fabric.launch()
        model, optimizer = fabric.setup(model, optimizer)
        loader = fabric.setup_dataloaders(loader)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        ```
    """

    # Whether setup() records itself on a LightningModule/TrainModule (module.fabric); the Trainer's own does not.
    _attaches_modules = True
    # Whether a Fabric that starts no processes sets its process up (device, process group) as soon as it is built.
    # The Trainer's own waits for its first run: as Lightning's, building a Trainer touches no device.
    _prepares_when_built = True

    @suggest_keywords
    def __init__(
        self,
        *,
        accelerator: AcceleratorName | Accelerator = "auto",
        strategy: StrategyName | Strategy = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: PrecisionName | None = None,
        plugins: Plugin | Sequence[Plugin] | None = None,
        callbacks: object | Sequence[object] | None = None,
        loggers: LoggerLike | Sequence[LoggerLike] | None = None,
        grad_accum_steps: int = 1,
        save_rng_states: bool = True,
        preemption_signals: bool | Sequence[int | str | signal.Signals] | None = None,
        compile: CompileOption = None,
    ) -> None:
        connector = Connector(
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            plugins=plugins,
        )
        if not isinstance(grad_accum_steps, int) or isinstance(grad_accum_steps, bool) or grad_accum_steps < 1:
            raise ValueError(f"grad_accum_steps={grad_accum_steps!r} must be an int >= 1.")
        self._connector = connector
        self._strategy = connector.strategy
        self._accelerator = connector.accelerator
        self._precision = connector.precision
        self._callbacks = one_or_many(callbacks)
        self._loggers = one_or_many(loggers)
        self._grad_accum_steps = grad_accum_steps
        self._save_rng_states = save_rng_states
        self._preemption_signals = resolve_signals(preemption_signals) if preemption_signals else []
        self._compile = check_compile_option(compile)
        self._preemption_watcher: PreemptionWatcher | None = None
        self._accumulation = AccumulationState()
        self._checkpointer: Checkpointer | None = None
        # Decided once: when neither strategy nor precision changes backward, call it directly.
        self._plain_backward = _backward_is_plain(self._strategy, self._precision)
        self._sync_is_noop = _no_backward_sync_is_noop(self._strategy)
        self._launched = False
        # The last accumulate() context, reused for the next micro-batch of the same module.
        self._window: AccumulationWindow | None = None
        # Weak: an id() of a collected module can be reused by a new one, which was then refused.
        self._setup_modules: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self._models_setup = 0
        # One process, or processes started by an outside launcher: nothing to spawn.
        self._runs_in_this_process = self._strategy.world_size == 1 or self._strategy.launcher is None
        if self._runs_in_this_process:
            if self._prepares_when_built:
                self._prepare_process()
            else:
                set_global_rank(self._strategy.global_rank)  # rank-zero messages are right before the first run

    def __getstate__(self) -> dict[str, Any]:
        # Spawned processes receive the Fabric by pickling; a WeakSet and signal handlers cannot travel.
        state = dict(self.__dict__)
        state["_setup_modules"] = list(self._setup_modules)
        state["_preemption_watcher"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_setup_modules"] = weakref.WeakSet(state["_setup_modules"])
        self.__dict__.update(state)

    # -- properties -------------------------------------------------------------------------------
    @property
    def accelerator(self) -> Accelerator:
        """The hardware this Fabric runs on (``CPUAccelerator``, ``CUDAAccelerator``, ...)."""
        return self._accelerator

    @property
    def strategy(self) -> Strategy:
        """How processes and parameters are laid out (``SingleDeviceStrategy``, ``DDPStrategy``, ...)."""
        return self._strategy

    @property
    def precision(self) -> Precision:
        """The dtypes plugin (``Precision`` for ``"32-true"``, ``MixedPrecision``, ...)."""
        return self._precision

    @property
    def device(self) -> torch.device:
        """The device this process computes on."""
        return self._strategy.root_device

    @property
    def global_rank(self) -> int:
        return self._strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self._strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self._strategy.node_rank

    @property
    def world_size(self) -> int:
        return self._strategy.world_size

    @property
    def is_global_zero(self) -> bool:
        return self._strategy.is_global_zero

    @property
    def loggers(self) -> list[LoggerLike]:
        return self._loggers

    @property
    def logger(self) -> LoggerLike | None:
        """The first logger (or ``None``)."""
        return self._loggers[0] if self._loggers else None

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per optimizer step inside `accumulate()` (settable between windows).

        Example:
            ```python
            fabric.grad_accum_steps = 8  # from the next window on
            ```
        """
        return self._grad_accum_steps

    @grad_accum_steps.setter
    def grad_accum_steps(self, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"grad_accum_steps={steps!r}; give an int >= 1.")
        self._grad_accum_steps = steps

    @property
    def accumulation_state(self) -> AccumulationState:
        """Where gradient accumulation stands (shared with the wrappers, loaders and checkpoints).

        Example:
            ```python
            fabric.accumulation_state.counter  # micro-batches seen in the current window
            ```
        """
        return self._accumulation

    @property
    def sync_gradients(self) -> bool:
        """Whether the current micro-batch ends an accumulation window (optimizer steps happen)."""
        return self._accumulation.sync_gradients

    # -- launching --------------------------------------------------------------------------------
    @overload
    def launch(self) -> None: ...

    @overload
    def launch(
        self, function: Callable[Concatenate[Fabric, _Params], _Result], *args: _Params.args, **kwargs: _Params.kwargs
    ) -> _Result: ...

    def launch(
        self,
        function: Callable[Concatenate[Fabric, _Params], _Result] = NO_FUNCTION,
        *args: _Params.args,
        **kwargs: _Params.kwargs,
    ) -> _Result | None:
        """Start the processes this configuration needs and run ``function(fabric, *args)`` in each.

        With a subprocess launcher (``strategy="ddp"``) the script itself is re-run per rank and
        ``function`` is optional; spawn/fork launchers need ``function``. For one process this only
        calls ``function``.

        Example:
            ```python
            fabric.launch(train, config)  # train(fabric, config) on every rank
            ```
        """
        launcher = self._strategy.launcher
        check_launch_function(
            function, launcher is not None and launcher.requires_function, self._strategy.strategy_name
        )
        run: Callable[..., Any] | None = None if function is NO_FUNCTION else function
        if launcher is not None and not self._launched and not self._runs_in_this_process:
            if self._strategy.world_size > 1 and _process_group_initialized():
                raise FabricxError(
                    "A torch.distributed process group is already initialised in this process; fabricx "
                    "cannot launch processes inside it. Run the script without your own init_process_group, "
                    "or start it with `fabricx run`/torchrun and let Fabric join that group."
                )
            return launcher.launch(self._run_in_process, run, *args, **kwargs)
        if not self._launched:
            self._prepare_process()
        return run(self, *args, **kwargs) if run is not None else None

    def _run_in_process(self, function: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
        self._prepare_process()
        return function(self, *args, **kwargs) if function is not None else None

    def _prepare_process(self) -> None:
        self._strategy.setup_environment()
        set_global_rank(self._strategy.global_rank)
        if self._preemption_signals and self._preemption_watcher is None:
            self._preemption_watcher = PreemptionWatcher(self._preemption_signals)
        self._launched = True

    @property
    def preemption_requested(self) -> bool:
        """Whether any rank received a preemption signal (agreed across ranks; a collective call).

        Check it at step boundaries, then save and call `exit_for_requeue()`.

        Example:
            ```python
            fabric = Fabric(preemption_signals=True)
            for step, batch in enumerate(loader):
                ...
                if fabric.preemption_requested:
                    fabric.save(manager.next_path(), state)
                    fabric.exit_for_requeue()
            ```
        """
        watcher = self._preemption_watcher
        local = watcher is not None and watcher.received is not None
        if self.world_size == 1 or not self._launched:
            return local
        flag = torch.tensor(1.0 if local else 0.0, device=self.device)
        return bool(self._strategy.all_reduce(flag, reduce_op="max").item() > 0)

    def exit_for_requeue(self, code: int = REQUEUE_EXIT_CODE) -> None:
        """Wait for every rank, release the process group and exit with ``code`` so a scheduler can requeue.

        On SLURM, global rank 0 also runs ``scontrol requeue`` for the job (an exit code does not reach
        SLURM through torchrun); ``FABRICX_SLURM_REQUEUE=0`` turns that off.
        """
        self.barrier("exit_for_requeue")
        if self.is_global_zero:
            from fabricx.utilities.requeue import request_slurm_requeue

            request_slurm_requeue()
        self._teardown()
        raise SystemExit(code)

    def _require_launched(self, what: str) -> None:
        if not self._launched:
            raise FabricxError(
                f"{what} needs the processes of this {self._strategy.world_size}-process configuration to exist: "
                "to use Fabric with more than one device, you must call `.launch()` first (or pass your training "
                "function to fabric.launch(fn)), or start the script with `fabricx run`."
            )

    # -- setup --------------------------------------------------------------------------------------
    @overload
    def setup(self, module: nn.Module, *, scheduler: None = None, move_to_device: bool = True) -> FabricModule: ...

    @overload
    def setup(
        self, module: nn.Module, optimizer: _Opt, /, *, scheduler: None = None, move_to_device: bool = True
    ) -> tuple[FabricModule, _Opt]: ...

    @overload
    def setup(
        self, module: nn.Module, optimizer: _Opt, /, *, scheduler: _Sched, move_to_device: bool = True
    ) -> tuple[FabricModule, _Opt, _Sched]: ...

    @overload
    def setup(
        self,
        module: nn.Module,
        optimizer: _Opt,
        second: _Opt2,
        /,
        *,
        scheduler: None = None,
        move_to_device: bool = True,
    ) -> tuple[FabricModule, _Opt, _Opt2]: ...

    @overload
    def setup(
        self, module: nn.Module, *optimizers: Optimizer, scheduler: object = None, move_to_device: bool = True
    ) -> tuple[Any, ...]: ...

    def setup(
        self, module: nn.Module, *optimizers: Optimizer, scheduler: _Sched | None = None, move_to_device: bool = True
    ) -> FabricModule | tuple[FabricModule | Optimizer | _Sched, ...]:
        """Set up a model and its optimizers (and optionally an LR scheduler) for this strategy.

        Returns the wrapped model, then the optimizers, then the scheduler if one was given. A type checker
        sees the model as a ``FabricModule`` and each optimizer as the class it was given: a set-up optimizer
        is an instance of that class (and of ``FabricOptimizer``), so torch's schedulers accept it.

        Example:
            ```python
            model, optimizer = fabric.setup(model, optimizer)
            ```
        """
        self._require_launched("setup()")
        original, module, compiled = self._prepare_module(module, "setup", move_to_device, optimizers)
        forward_module, optimizers_out, scheduler = self._strategy.setup_module_and_optimizers(
            module, list(optimizers), scheduler
        )
        wrapped = self._wrap_module(forward_module, original, move_to_device, compiled)
        wrapped_optimizers = [FabricOptimizer(opt, self._strategy, self._accumulation) for opt in optimizers_out]
        if isinstance(original, HoldsFabricOptimizers) and self._attaches_modules:  # self.optimizers() returns them
            setattr(original, "_fabric_optimizers", wrapped_optimizers)  # noqa: B010 - typed as Tensor | Module
        if scheduler is not None:
            scheduler = wrap_scheduler_step(scheduler, self._accumulation)
        outputs: list[Any] = [wrapped, *wrapped_optimizers]
        if scheduler is not None:
            outputs.append(scheduler)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def setup_module(self, module: nn.Module, move_to_device: bool = True) -> FabricModule:
        """Set up a model alone (then create the optimizer and call `setup_optimizers()`).

        Example:
            ```python
            model = fabric.setup_module(model)
            optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters()))
            ```
        """
        self._require_launched("setup_module()")
        original, module, compiled = self._prepare_module(module, "setup_module", move_to_device)
        forward_module = self._strategy.setup_module(module)
        return self._wrap_module(forward_module, original, move_to_device, compiled)

    @overload
    def setup_optimizers(self, optimizer: _Opt, /) -> _Opt: ...

    @overload
    def setup_optimizers(self, optimizer: _Opt, second: _Opt2, /) -> tuple[_Opt, _Opt2]: ...

    @overload
    def setup_optimizers(self, *optimizers: Optimizer) -> tuple[Optimizer, ...]: ...

    def setup_optimizers(self, *optimizers: Optimizer) -> Optimizer | tuple[Optimizer, ...]:
        """Set up optimizers created over an already set-up model's parameters.

        Example:
            ```python
            optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
            ```
        """
        self._require_launched("setup_optimizers()")
        if not optimizers:
            raise ValueError("`setup_optimizers` requires at least one optimizer as input.")
        if any(isinstance(opt, FabricOptimizer) for opt in optimizers):
            raise SetupError(
                "An optimizer should be passed only once to the `setup_optimizers` method; pass the optimizer you "
                "created, not the one setup_optimizers() returned."
            )
        # Each is also an instance of the optimizer's own class (the identity facade), so an Optimizer.
        wrapped = [
            cast(Optimizer, FabricOptimizer(self._strategy.setup_optimizer(opt), self._strategy, self._accumulation))
            for opt in optimizers
        ]
        return wrapped[0] if len(wrapped) == 1 else tuple(wrapped)

    @overload
    def setup_dataloaders(
        self,
        dataloader: DataLoader,
        /,
        *,
        use_distributed_sampler: bool = True,
        move_to_device: bool = True,
        global_batch_size: int | None = None,
    ) -> FabricDataLoader: ...

    @overload
    def setup_dataloaders(
        self,
        *dataloaders: DataLoader,
        use_distributed_sampler: bool = True,
        move_to_device: bool = True,
        global_batch_size: int | None = None,
    ) -> tuple[FabricDataLoader, ...]: ...

    def setup_dataloaders(
        self,
        *dataloaders: DataLoader,
        use_distributed_sampler: bool = True,
        move_to_device: bool = True,
        global_batch_size: int | None = None,
    ) -> FabricDataLoader | tuple[FabricDataLoader, ...]:
        """Make data loaders stateful, give each rank its share, and move batches to the device.

        ``global_batch_size`` sets each rank's batch size to ``global_batch_size // world_size`` (it must
        divide), so a run resumed on another number of processes keeps the samples per step.

        Example:
            ```python
            train_loader, val_loader = fabric.setup_dataloaders(train_loader, val_loader)
            ```
        """
        if not dataloaders:
            raise ValueError(
                "`setup_dataloaders` requires at least one dataloader as input: pass at least one DataLoader."
            )
        self._require_launched("setup_dataloaders()")
        if any(isinstance(loader, FabricDataLoader) for loader in dataloaders):
            raise SetupError(
                "A dataloader should be passed only once to the `setup_dataloaders` method; pass the DataLoader you "
                "created, not the one setup_dataloaders() returned."
            )
        if any(not isinstance(loader, DataLoader) for loader in dataloaders):
            raise TypeError(
                "Only PyTorch DataLoader are currently supported in `setup_dataloaders`; got "
                f"{', '.join(type(loader).__name__ for loader in dataloaders)}. Wrap your dataset in a DataLoader "
                "(torch.utils.data.DataLoader)."
            )
        kwargs = self._strategy.distributed_sampler_kwargs or {"num_replicas": 1, "rank": 0}
        batch_size = _per_rank_batch_size(global_batch_size, kwargs["num_replicas"])
        loaders = []
        for loader in dataloaders:
            stateful = build_stateful_loader(
                loader,
                num_replicas=kwargs["num_replicas"],
                rank=kwargs["rank"],
                use_distributed_sampler=use_distributed_sampler,
                batch_size=batch_size,
            )
            stateful = self._strategy.process_dataloader(stateful)
            device = self.device if move_to_device else None
            wrapped = FabricDataLoader(
                stateful, device, self._accumulation, rank=kwargs["rank"], world_size=kwargs["num_replicas"]
            )
            loaders.append(wrapped)
        return loaders[0] if len(loaders) == 1 else tuple(loaders)

    def _prepare_module(
        self, module: nn.Module, method: str, move_to_device: bool, optimizers: Sequence[Optimizer] = ()
    ) -> tuple[nn.Module, nn.Module, Any]:
        """What `setup()` and `setup_module()` do before the strategy: the checks, then the module on the device (one
        built on meta stays there: the strategy materialises it after sharding) and in the precision's dtype.

        Returns the user's module, the converted one and the ``torch.compile`` options it was wrapped with.
        """
        module, compiled = split_compiled(module)
        self._check_module_not_setup(module, method)
        for optimizer in optimizers:
            self._check_optimizer(optimizer, module)
        if move_to_device and not has_meta_tensors(module):
            self._strategy.module_to_device(module)
        return module, self._precision.convert_module(module), compiled

    def _wrap_module(
        self, forward_module: nn.Module, original: nn.Module, move_to_device: bool, compiled: Any = None
    ) -> FabricModule:
        self._strategy.materialize_module(forward_module)
        forward_module = compile_forward(forward_module, compiled, self._compile)
        self._setup_modules.add(original)
        self._models_setup += 1
        if isinstance(original, HoldsFabric) and self._attaches_modules:  # a LightningModule/TrainModule: self.fabric,
            setattr(original, "_fabric", self)  # noqa: B010 - self.logger, self.log then go through this Fabric
        wrapped = FabricModule(forward_module, self._precision, original)
        # Where a module without parameters or buffers "is": Lightning's rule.
        wrapped.__dict__["_fabricx_device"] = self.device if move_to_device else torch.device("cpu")
        for callback in self._callbacks:
            hook = getattr(callback, "on_after_setup", None)
            if callable(hook):
                hook(fabric=self, module=wrapped)
        return wrapped

    def _check_module_not_setup(self, module: Any, method: str) -> None:
        if isinstance(module, FabricModule):
            raise SetupError(
                f"A model should be passed only once to the `{method}` method: {type(unwrap(module)).__name__} "
                "is already set up. Keep using the object setup() returned."
            )
        if not isinstance(module, nn.Module):
            raise TypeError(f"setup() expects a torch.nn.Module first, got {type(module).__name__}.")
        if module in self._setup_modules and not self._strategy.allows_repeated_module_setup:
            raise SetupError(
                f"The module {type(module).__name__} was already set up by this Fabric, and strategy="
                f"{self._strategy.strategy_name!r} changes a module when it sets it up (sharding or wrapping it in "
                "place), so it cannot be set up twice. Call setup() once per model and keep using the object it "
                "returned."
            )

    @staticmethod
    def _check_optimizer(optimizer: Any, module: nn.Module) -> None:
        if isinstance(optimizer, FabricOptimizer):
            raise SetupError(
                "An optimizer should be passed only once to the `setup` method; pass the optimizer you created, "
                "not the one setup() returned."
            )
        if not isinstance(optimizer, Optimizer):
            raise TypeError(
                f"setup() got {type(optimizer).__name__} where an optimizer was expected. Pass the "
                "scheduler as setup(model, optimizer, scheduler=scheduler)."
            )
        module_params = {id(p) for p in module.parameters()}
        foreign = [p for p in optimizer_parameters(optimizer) if id(p) not in module_params]
        if foreign:
            raise FabricxError(
                f"The optimizer holds {len(foreign)} parameter(s) that are not in the module "
                f"{type(module).__name__} given to setup(). Build the optimizer from model.parameters() of "
                "the same model, or set up each model with its own optimizer."
            )

    # -- the step -----------------------------------------------------------------------------------
    def backward(self, tensor: Tensor, *args: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        """Backward through the strategy and precision (loss scaling, DeepSpeed engine, ...).

        Inside `accumulate()`, the loss is divided by the length of the current window.

        Example:
            ```python
            fabric.backward(loss)
            ```
        """
        if not self._launched:
            self._require_launched("backward()")
        divisor = self._accumulation.loss_divisor  # inside a window: its policy's (the window's real length)
        if divisor != 1:
            tensor = tensor / divisor
        try:
            if self._plain_backward:
                tensor.backward(*args, **kwargs)
            else:
                self._strategy.backward(tensor, model, *args, **kwargs)
        except RuntimeError as error:
            # Looked at only when backward failed: torch refuses a loss of several elements without a gradient.
            if not args and kwargs.get("gradient") is None and tensor.numel() != 1:
                raise RuntimeError(non_scalar_loss(tensor)) from error
            raise

    def accumulate(self, module: nn.Module, epoch_length: int | None = None) -> AccumulationWindow:
        """One micro-batch of gradient accumulation (``Fabric(grad_accum_steps=N)``).

        Off a window boundary, gradient sync is off and ``optimizer.step()``, ``zero_grad()`` and a
        set-up scheduler's ``step()`` do nothing. The last window of an epoch may be shorter; the
        loss is divided by the window's real length. The epoch's length is that of the set-up loader
        that yielded the current batch, or ``epoch_length`` when the loop stops an epoch early.

        Example:
            ```python
            for batch in loader:
                with fabric.accumulate(model):
                    fabric.backward(loss_fn(model(batch)))
                    optimizer.step()
                    optimizer.zero_grad()
            ```
        """
        window = self._window
        steps = self._grad_accum_steps
        # Reused for consecutive micro-batches of one module: this runs on every micro-batch.
        if window is None or window.active or window.steps != steps or window.module_ref() is not module:
            if steps > 1:
                _require_set_up(module, "accumulate()")
            # One process: the strategy has no gradient sync to switch off.
            no_sync = None if self._sync_is_noop else self._strategy.no_backward_sync
            window = AccumulationWindow(self._accumulation, steps, module, no_sync)
            if self._window is None or not self._window.active:
                self._window = window
        window.epoch_length = epoch_length
        return window

    @contextlib.contextmanager
    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> Generator[None, None, None]:
        """Skip gradient synchronisation in ``backward`` while inside (for manual accumulation).

        Example:
            ```python
            with fabric.no_backward_sync(model, enabled=not is_last_micro_batch):
                fabric.backward(loss)
            ```
        """
        wrapped = _require_set_up(module)
        if not enabled:
            yield
            return
        with self._strategy.no_backward_sync(wrapped._forward_module, enabled):
            yield

    def clip_gradients(
        self,
        module: nn.Module,
        optimizer: Optimizer | FabricOptimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> Tensor | None:
        """Clip gradients by value (``clip_val``) or by total norm (``max_norm``; returns the norm).

        Gradients are unscaled first under ``"16-mixed"``; sharded gradients are clipped globally.

        Example:
            ```python
            total_norm = fabric.clip_gradients(model, optimizer, max_norm=1.0)
            ```
        """
        if (clip_val is None) == (max_norm is None):
            raise ValueError(
                f"clip_gradients() takes exactly one of clip_val or max_norm; got clip_val={clip_val!r}, "
                f"max_norm={max_norm!r}."
            )
        inner_module = module._forward_module if isinstance(module, FabricModule) else module
        inner_optimizer = unwrap(optimizer)
        if max_norm is not None:
            return self._strategy.clip_gradients_norm(
                inner_module,
                inner_optimizer,
                max_norm=max_norm,
                norm_type=norm_type,
                error_if_nonfinite=error_if_nonfinite,
            )
        assert clip_val is not None  # exactly one of the two was given
        self._strategy.clip_gradients_value(inner_module, inner_optimizer, clip_val=clip_val)
        return None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's forward context, for computation outside the model's ``forward``.

        Example:
            ```python
            with fabric.autocast():
                loss = criterion(model(x), y)
            ```
        """
        return self._precision.forward_context()

    # -- tensors and devices --------------------------------------------------------------------------
    def to_device(self, obj: _T) -> _T:
        """Move a module, a tensor or a nested collection of tensors to this process's device.

        Example:
            ```python
            batch = fabric.to_device(batch)
            ```
        """
        if isinstance(obj, nn.Module):
            self._strategy.module_to_device(obj)
            return obj
        return move_data_to_device(obj, self.device)

    def init_module(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Context to build a model on the right device and dtype; ``empty_init=True`` builds it on the
        meta device (no memory, no init) and it is materialised after `setup()`.

        Example:
            ```python
            with fabric.init_module(empty_init=True):
                model = BigModel()
            model = fabric.setup_module(model)
            fabric.load("ckpt", {"model": model})
            ```
        """
        return self._strategy.module_init_context(empty_init=empty_init)

    def init_tensor(self) -> contextlib.AbstractContextManager:
        """Context in which new tensors are created on the device in the precision's dtype.

        Example:
            ```python
            with fabric.init_tensor():
                buffer = torch.zeros(10)
            ```
        """
        return self._strategy.tensor_init_context()

    # -- processes and collectives ----------------------------------------------------------------------
    def print(self, *args: object, **kwargs: Any) -> None:
        """``print`` on the global rank zero only."""
        if self.is_global_zero:
            print(*args, **kwargs)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process reaches this point."""
        self._require_launched("barrier()")
        self._strategy.barrier(name=name)

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        """Send a picklable object (or tensor) from rank ``src`` to every rank.

        Example:
            ```python
            run_name = fabric.broadcast(run_name)
            ```
        """
        self._require_launched("broadcast()")
        return self._strategy.broadcast(obj, src=src)

    @overload
    def all_gather(
        self, data: Tensor | float, group: ProcessGroup | None = None, sync_grads: bool = False
    ) -> Tensor: ...

    @overload
    def all_gather(self, data: _T, group: ProcessGroup | None = None, sync_grads: bool = False) -> _T: ...

    def all_gather(self, data: _T, group: ProcessGroup | None = None, sync_grads: bool = False) -> _T | Tensor:
        """Gather tensors (or nested collections of them) from every rank; shapes may differ in the
        first dimension across ranks only if all other dimensions agree (padded, then trimmed).

        Returns tensors with a new leading dimension of size ``world_size`` (a list where shapes differ);
        on one process the data comes back without a new dimension (``all_gather(1.5)`` is
        ``tensor(1.5)``), as in Lightning Fabric.

        Example:
            ```python
            all_predictions = fabric.all_gather(predictions)
            ```
        """
        self._require_launched("all_gather()")
        data = convert_to_tensors(data, self.device)  # numbers become tensors, as in Lightning Fabric
        return apply_to_collection(data, Tensor, self._strategy.all_gather, group=group, sync_grads=sync_grads)

    @overload
    def all_reduce(
        self, data: Tensor | float, group: ProcessGroup | None = None, reduce_op: str | ReduceOp = "mean"
    ) -> Tensor: ...

    @overload
    def all_reduce(self, data: _T, group: ProcessGroup | None = None, reduce_op: str | ReduceOp = "mean") -> _T: ...

    def all_reduce(
        self, data: _T, group: ProcessGroup | None = None, reduce_op: str | ReduceOp = "mean"
    ) -> _T | Tensor:
        """Reduce tensors (or nested collections, or numbers) across ranks: mean, sum, min or max (or a
        ``torch.distributed.ReduceOp``).

        As in Lightning Fabric, a tensor is reduced in place (its dtype kept) and returned: after
        ``fabric.all_reduce(loss)`` the variable ``loss`` holds the mean on every rank.

        Example:
            ```python
            mean_loss = fabric.all_reduce(loss, reduce_op="mean")
            ```
        """
        self._require_launched("all_reduce()")
        check_reduce_op(reduce_op)
        data = convert_to_tensors(data, self.device)
        return apply_to_collection(data, Tensor, self._strategy.all_reduce, group=group, reduce_op=reduce_op)

    @contextlib.contextmanager
    def rank_zero_first(self, local: bool = False) -> Generator[None, None, None]:
        """Run the block on rank zero first (e.g. to download or prepare data), then on the others.

        Example:
            ```python
            with fabric.rank_zero_first():
                dataset = prepare_dataset()
            ```
        """
        first = self.local_rank == 0 if local else self.is_global_zero
        if not first:
            self.barrier("rank_zero_first")
        try:
            yield
        finally:
            if first:
                self.barrier("rank_zero_first")

    # -- checkpoints ------------------------------------------------------------------------------------
    @property
    def checkpointer(self) -> Checkpointer:
        """The one `fabricx.checkpoint.checkpointer.Checkpointer` of this Fabric: every save and load of
        ``fabric``, the Trainer and the Accelerate adapter goes through it, and it owns the asynchronous save
        in flight.

        Example:
            ```python
            fabric.checkpointer.wait()  # the last async save is committed
            ```
        """
        if self._checkpointer is None:
            from fabricx.checkpoint.checkpointer import Checkpointer

            self._checkpointer = Checkpointer(self._strategy, self._with_internal_state)
        return self._checkpointer

    def save(
        self,
        path: str | os.PathLike,
        state: dict[str, Any],
        filter: dict[str, Callable] | None = None,
        *,
        async_save: bool = False,
        layout: str | None = None,
    ) -> AsyncSave | None:
        """Save models, optimizers, schedulers, data loaders and plain values; every rank must call it.

        A path that names a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) is written as ONE ``torch.save``
        file, as Lightning Fabric writes it: ``torch.load(path, weights_only=True)`` and Lightning's
        ``Fabric.load`` read it. Any other path (or ``layout="directory"``) is a fabricx checkpoint
        directory. Either is written atomically: a failed save never damages a previous one.
        ``layout="dcp"`` writes a torch.distributed.checkpoint folder plus ``meta.pt``, as Lightning's
        FSDP / ModelParallel strategies write a sharded checkpoint (also atomically, unlike theirs);
        ``layout="deepspeed"`` (DeepSpeed strategy) the engine's own folder, as Lightning's DeepSpeedStrategy
        writes one (atomically too).
        Every rank's random generator states and the grad scaler are stored too, and inside an
        accumulation window its position and every rank's accumulated gradients, so the resumed run
        continues the window exactly. ``path`` may be an
        fsspec URL (``s3://``, ``gs://``, ``memory://``).

        With ``async_save=True`` the state is copied to host memory and written in a background thread;
        the call returns an `fabricx.checkpoint.background.AsyncSave` handle at once. The
        checkpoint is committed only when every rank's files are durable; the next save, a load and the
        end of the process wait for it; a crash before the commit leaves the previous checkpoint the latest.

        Example:
            ```python
            state = {"model": model, "optimizer": optimizer, "loader": loader}
            fabric.save("ckpt/step_100", state)  # a directory
            fabric.save("out/model.pth", state)  # one file
            # training goes on
            handle = fabric.save("ckpt/step_200", state, async_save=True)
            ```
        """
        if not isinstance(state, dict):
            raise TypeError(f"save() expects a dict of things to save, got {type(state).__name__}.")
        self._require_launched("save()")
        mode = "async" if async_save else "sync"
        return self.checkpointer.save(path, state, filter, layout=layout, mode=mode)

    def load(
        self,
        path: str | os.PathLike,
        state: dict[str, Any] | None = None,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Restore a checkpoint into the objects of ``state`` (in place); return what was not restored.

        Without ``state``, return the whole checkpoint's contents. Plain values in ``state`` are
        replaced by the loaded ones. Loading never executes code stored in the file, unless
        ``weights_only=False`` is given: then a foreign single-file checkpoint is unpickled (with a
        warning); only do that for files you trust.

        Example:
            ```python
            remainder = fabric.load("ckpt/step_100", state)
            step = state["step"]
            ```
        """
        return self.checkpointer.load(path, state, strict, weights_only=weights_only)

    def load_raw(
        self,
        path: str | os.PathLike,
        obj: nn.Module | Optimizer,
        strict: bool = True,
        *,
        weights_only: bool | None = None,
    ) -> None:
        """Load a plain state dict (e.g. written by ``torch.save(model.state_dict())``) into one object.

        ``weights_only=False`` unpickles a file that holds more than tensors (with a warning).

        Example:
            ```python
            fabric.load_raw("pretrained.pt", model)
            ```
        """
        self.checkpointer.load(path, unwrap(obj), strict, weights_only=weights_only)

    def save_checkpoint(
        self,
        project: CheckpointManager | str | os.PathLike[str],
        state: dict[str, Any],
        filter: dict[str, Callable] | None = None,
        async_save: bool = False,
    ) -> Path:
        """Save into a project's next ``checkpoints/checkpoint_{n}`` and apply its keep-last-k retention.

        ``project`` is a `fabricx.checkpoint.CheckpointManager` or a project directory.
        Older checkpoints are removed only after the new one is complete. Every rank must call it.

        Example:
            ```python
            manager = CheckpointManager("runs/exp1", total_limit=3)
            path = fabric.save_checkpoint(manager, state)
            ```
        """
        self._require_launched("save_checkpoint()")
        mode = "async" if async_save else "sync"
        return self.checkpointer.save_next(project, state, filter, mode=mode)

    def load_latest(
        self, project: CheckpointManager | str | os.PathLike[str], state: dict[str, Any], strict: bool = True
    ) -> Path | None:
        """Restore ``state`` from a project's newest complete checkpoint; return its path (``None`` if none).

        Example:
            ```python
            resumed_from = fabric.load_latest("runs/exp1", state)  # None on the first run
            ```
        """
        path = self.checkpointer.latest(project)
        if path is not None:
            self.load(path, state, strict=strict)
        return path

    def save_weights(self, module: nn.Module, directory: str | os.PathLike, max_shard_size: int | str = "10GB") -> None:
        """Export a model's full weights as safetensors (sharded with an index past ``max_shard_size``).

        Tied weights are stored once and come back tied. Every rank must call it; rank zero writes.

        Example:
            ```python
            fabric.save_weights(model, "export/", max_shard_size="2GB")
            ```
        """
        from fabricx.checkpoint.export import parse_size, save_weights

        limit = parse_size(max_shard_size)
        state_dict = self._strategy.get_module_state_dict(unwrap(module))
        if self.is_global_zero:
            save_weights(state_dict, directory, max_shard_size=limit)
        self.barrier("save_weights")

    def load_weights(self, module: nn.Module, path: str | os.PathLike, strict: bool = True) -> IncompatibleKeys:
        """Load weights exported by `save_weights()` (or one ``.safetensors`` file) into ``module``.

        Example:
            ```python
            fabric.load_weights(model, "export/")
            ```
        """
        from fabricx.checkpoint.export import load_weights

        return self._strategy.load_module_state_dict(unwrap(module), load_weights(path), strict=strict)

    def _with_internal_state(self, state: dict[str, Any]) -> dict[str, Any]:
        from fabricx.accumulation.entries import window_entries

        internal = dict(state)
        if self._save_rng_states:
            internal[_RNG_KEY] = RNGStates()
        internal[_PRECISION_KEY] = self._precision
        # Inside an accumulation window: its position and every rank's accumulated gradients.
        internal.update(window_entries(self._accumulation, self._strategy, state))
        return internal

    # -- callbacks and logging ----------------------------------------------------------------------------
    def call(self, hook_name: str, *args: object, **kwargs: object) -> None:
        """Call ``hook_name(*args, **kwargs)`` on every callback that has such a method.

        Each callback receives only the keyword arguments its method accepts (all of them if it
        takes ``**kwargs``), so callbacks can implement the same hook with different signatures.

        Example:
            ```python
            fabric = Fabric(callbacks=[MyCallback()])
            fabric.call("on_train_epoch_end", results=results)
            ```
        """
        for callback in self._callbacks:
            method = getattr(callback, hook_name, None)
            if method is None:
                continue
            if not callable(method):
                rank_zero_warn(
                    f"Skipping the callback `{type(callback).__name__}.{hook_name}` because it is not callable."
                )
                continue
            method(*args, **filter_callback_kwargs(method, kwargs))

    def log(self, name: str, value: object, step: int | None = None) -> None:
        """Log one metric to every logger (on rank zero).

        Example:
            ```python
            fabric.log("loss", loss, step=step)
            ```
        """
        self.log_dict({name: value}, step=step)

    def log_dict(self, metrics: Mapping[str, object], step: int | None = None) -> None:
        """Log several metrics to every logger (on rank zero)."""
        metrics = apply_to_collection(metrics, Tensor, scalar_metric)
        for logger in self._loggers:
            logger.log_metrics(metrics=metrics, step=step)

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def seed_everything(seed: int | None = None, workers: bool | None = None, verbose: bool = True) -> int:
        """Seed every random generator; dataloader workers too unless ``workers=False`` (Lightning's default).

        Example:
            ```python
            Fabric.seed_everything(42)
            ```
        """
        return _seed.seed_everything(seed, workers=True if workers is None else workers, verbose=verbose)

    @overload
    @staticmethod
    def unwrap(obj: FabricModule) -> nn.Module: ...

    @overload
    @staticmethod
    def unwrap(obj: FabricDataLoader) -> DataLoader: ...

    @overload
    @staticmethod
    def unwrap(obj: _T) -> _T: ...

    @staticmethod
    def unwrap(obj: _T) -> _T | nn.Module | DataLoader:
        """The user's own module/optimizer/loader behind a fabricx wrapper."""
        return unwrap(obj)

    def _teardown(self) -> None:
        self._strategy.teardown()


def _no_backward_sync_is_noop(strategy: Strategy) -> bool:
    return type(strategy).no_backward_sync is Strategy.no_backward_sync


def _backward_is_plain(strategy: Strategy, precision: Precision) -> bool:
    precision_type = type(precision)
    return (
        type(strategy).backward is Strategy.backward
        and precision_type.pre_backward is Precision.pre_backward
        and precision_type.backward is Precision.backward
        and precision_type.post_backward is Precision.post_backward
    )


def _process_group_initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


__all__ = ["Fabric"]


def _per_rank_batch_size(global_batch_size: int | None, world_size: int) -> int | None:
    if global_batch_size is None:
        return None
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise ValueError(f"global_batch_size={global_batch_size!r}; give a positive int.")
    if global_batch_size % world_size:
        raise ValueError(
            f"global_batch_size={global_batch_size} cannot be split evenly over {world_size} processes. "
            f"Give a multiple of {world_size}, or set the per-process batch size on the DataLoader instead."
        )
    return global_batch_size // world_size


def _require_set_up(module: nn.Module, caller: str = "no_backward_sync()") -> FabricModule:
    if not isinstance(module, FabricModule):
        raise TypeError(f"{caller} needs the model returned by fabric.setup(), got {type(module).__name__}.")
    return module
