"""An Accelerate-compatible ``Accelerator`` implemented over `fabricx.Fabric`.

A script written for Hugging Face Accelerate switches with one import line:

```python
from fabricx.compat.accelerate import Accelerator
```

Start it with ``python script.py`` (one process) or ``fabricx run --devices 2 script.py`` /
``torchrun --nproc-per-node 2 script.py`` (several processes).

Where Accelerate's behaviour is wrong, this adapter is right:

* automatic checkpoint numbers keep counting after a restart (one past the highest on disk) and
  ``load_state()`` picks the numerically newest complete checkpoint;
* a stateful loader reports the loaded position right after ``load_state()``;
* a shuffled loader resumes its exact order, in one process as in many, replaying nothing;
* ``mixed_precision="fp16"`` on CPU runs with the CPU grad scaler instead of being ignored.
"""

from __future__ import annotations

import contextlib
import gc
import os
import types
import warnings
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from fabricx._compat.lr_scheduler import count_scheduler_step, scheduler_step_count
from fabricx.accumulation.policies import RunningCount
from fabricx.compat.accelerate.collectives import CollectivesMixin
from fabricx.compat.accelerate.config import (
    DataLoaderConfiguration,
    DistributedType,
    GradientAccumulationPlugin,
    ProjectConfiguration,
    accelerate_precision_name,
    fabric_precision,
)
from fabricx.compat.accelerate.data import (
    AcceleratedDataLoader,
    GradientState,
    LoaderOptions,
    SkipBatchesLoader,
)
from fabricx.compat.accelerate.dynamo import TorchDynamoPlugin, compile_option
from fabricx.compat.accelerate.kwargs import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    LocalSGD,
    ProfileKwargs,
    comm_hook_options,
    ddp_options,
    profile_context,
)
from fabricx.compat.accelerate.memory import find_executable_batch_size
from fabricx.compat.accelerate.model import answer_as_prepared, ddp_of
from fabricx.compat.accelerate.process import (
    AcceleratorState,
    PartialState,
    ProcessSelection,
    externally_launched,
    launched_fabric,
)
from fabricx.compat.accelerate.state import StateMixin
from fabricx.compat.accelerate.tracking import build_trackers, normalize_log_with
from fabricx.fabric import Fabric
from fabricx.utilities import seed as _seed
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.utilities.identity import intercept_method, is_intercepted, user_class
from fabricx.wrappers import FabricModule, FabricOptimizer, unwrap

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "GradientAccumulationPlugin",
    "GradientState",
    "LocalSGD",
    "PartialState",
    "ProfileKwargs",
    "ProjectConfiguration",
    "TorchDynamoPlugin",
    "find_executable_batch_size",
    "prepare_data_loader",
    "set_seed",
    "skip_first_batches",
]

_MULTI_PROCESS_TYPES = (DistributedType.MULTI_GPU, DistributedType.MULTI_CPU, DistributedType.MULTI_MPS)


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (and dataloader workers) like ``accelerate.utils.set_seed``.

    ``device_specific=True`` adds the process index, so processes draw different numbers;
    ``deterministic=True`` also asks torch for deterministic algorithms.

    Example:
        ```python
        set_seed(42)
        ```
    """
    if device_specific:
        seed += int(os.environ.get("RANK", 0))
    _seed.seed_everything(seed, workers=True)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> SkipBatchesLoader:
    """Iterate ``dataloader`` without its first ``num_batches`` batches (see
    `Accelerator.skip_first_batches()`).

    Example:
        ```python
        for batch in skip_first_batches(loader, 10): ...
        ```
    """
    return SkipBatchesLoader(dataloader, num_batches)


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: Any = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    **kwargs: Any,
) -> AcceleratedDataLoader:
    """Accelerate's ``prepare_data_loader``: this process's share of ``dataloader`` (see
    `fabricx.compat.accelerate.data.AcceleratedDataLoader`) without an Accelerator.

    Example:
        ```python
        loader = prepare_data_loader(DataLoader(range(64), batch_size=8), put_on_device=True)
        ```
    """
    state = PartialState()
    options = LoaderOptions(
        num_processes=state.num_processes if num_processes is None else num_processes,
        process_index=state.process_index if process_index is None else process_index,
        device=(device or state.device) if put_on_device else None,
        split_batches=split_batches,
        even_batches=even_batches,
        dispatch_batches=dispatch_batches,
        use_seedable_sampler=use_seedable_sampler,
        data_seed=data_seed,
        non_blocking=non_blocking,
        iterator_at_prepare=use_stateful_dataloader,
    )
    if dispatch_batches and not put_on_device:
        raise ValueError("dispatch_batches=True needs put_on_device=True (the batches are sent to the device).")
    return AcceleratedDataLoader(dataloader, options, GradientState())


#: The kwargs_handlers the adapter reads, by class name (fabricx's own classes or Accelerate's).
_HANDLERS = ("DistributedDataParallelKwargs", "ProfileKwargs")


def _read_handlers(handlers: Sequence[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for handler in handlers:
        name = type(handler).__name__
        if name not in _HANDLERS:
            raise MisconfigurationError(
                f"kwargs_handlers: {name} is an Accelerate object fabricx does not read; it reads "
                f"{', '.join(_HANDLERS)}. Pass other options through the fabricx flags instead "
                "(Accelerator(strategy=DDPStrategy(timeout=...)), mixed_precision=...)."
            )
        if name in found:
            raise ValueError(f"You can only pass one {type(handler)} in `kwargs_handlers`.")
        found[name] = handler
    return found


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1")) if externally_launched() else 1


def _unchanged(data: Any) -> Any:
    return data


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "state_dict") and isinstance(getattr(obj, "optimizer", None), Optimizer)
    )


class Accelerator(ProcessSelection, StateMixin, CollectivesMixin):
    """Hugging Face Accelerate's ``Accelerator`` on top of `fabricx.Fabric`.

    Args:
        mixed_precision: ``None`` (the environment decides, else full precision), ``"no"``, ``"fp16"``
            (autocast + grad scaler, on CUDA or CPU) or ``"bf16"``.
        gradient_accumulation_steps: micro-batches per optimizer step inside `accumulate()`.
        cpu: run on the CPU even when a GPU is present.
        project_config: a `ProjectConfiguration` (checkpoint folder, automatic naming, retention).
        dataloader_config: a `DataLoaderConfiguration` (``use_stateful_dataloader=True`` to resume
            loaders mid-epoch).
        log_with: ``"csv"``, ``"tensorboard"``, ``"mlflow"``, ``"wandb"``, ``"all"`` (every installed tracker of
            Accelerate's; fabricx's ``"csv"`` only by name), a fabricx logger, or a list of them.
        dynamo_backend: ``torch.compile`` every prepared model with this backend (``"inductor"``, ...).
        dynamo_plugin: a `TorchDynamoPlugin` (backend, mode, fullgraph, dynamic, options, regional).
        project_dir: shortcut for ``ProjectConfiguration(project_dir=...)``.
        device_placement: move prepared models and batches to `device`.
        step_scheduler_with_optimizer: step prepared schedulers only when the optimizer steps, once per
            process (Accelerate's convention for schedules counted in single-process batches).
        split_batches: shortcut for `DataLoaderConfiguration(split_batches=...)`.
        even_batches: shortcut for `DataLoaderConfiguration(even_batches=...)`.
        gradient_accumulation_plugin: a `GradientAccumulationPlugin` (``num_steps``,
            ``sync_each_batch``, ``adjust_scheduler``, ``sync_with_dataloader``).
        rng_types: accepted for compatibility; every random generator is checkpointed.
        kwargs_handlers: a ``DistributedDataParallelKwargs`` (DDP options and communication hook, under
            several processes) and/or a ``ProfileKwargs`` (for `profile()`), fabricx's or Accelerate's.
        strategy: a fabricx strategy (``"ddp"``, ``"fsdp"``, ``"deepspeed"`` or a strategy object),
            the fabricx flag that replaces Accelerate's plugin objects.
        exact_window_scaling: divide the losses of an epoch's last, shorter accumulation window by
            that window's real length, so its step is an average like every other one (fabricx's own
            arithmetic, as ``Fabric(grad_accum_steps=N)`` does). By default every micro-batch's loss is
            divided by ``gradient_accumulation_steps``, as Accelerate does, so the adapter gives
            Accelerate's numbers. ``FABRICX_ACCELERATE_EXACT_WINDOW_SCALING=1`` in the environment sets it too.

    Example:
        ```python
        accelerator = Accelerator(gradient_accumulation_steps=2, mixed_precision="bf16")
        model, optimizer, loader, scheduler = accelerator.prepare(
            model, optimizer, loader, scheduler
        )
        for inputs, targets in loader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
        ```
    """

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool = False,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: Sequence[str] | None = None,
        log_with: Any = None,
        project_dir: str | os.PathLike[str] | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: list[Any] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: Any = None,
        even_batches: bool = True,
        strategy: Any = None,
        exact_window_scaling: bool = False,
    ) -> None:
        for name, value, flag in (
            ("deepspeed_plugin", deepspeed_plugin, "Accelerator(strategy=DeepSpeedStrategy(stage=..., ...))"),
            ("fsdp_plugin", fsdp_plugin, 'Accelerator(strategy=FSDPStrategy(...)) (or strategy="fsdp")'),
            ("megatron_lm_plugin", megatron_lm_plugin, "Accelerator(strategy=ModelParallelStrategy(...))"),
        ):
            if value is not None:
                raise MisconfigurationError(
                    f"{name} is an Accelerate plugin object fabricx does not read. Pass the fabricx strategy "
                    f"instead: {flag}, with the strategies from fabricx.strategies."
                )
        handlers = _read_handlers(kwargs_handlers or [])
        self.ddp_handler = handlers.get("DistributedDataParallelKwargs")
        self.profile_handler = handlers.get("ProfileKwargs")
        if self.ddp_handler is not None and _world_size() > 1:
            if strategy is not None:
                raise MisconfigurationError(
                    "Give DDP options either as kwargs_handlers=[DistributedDataParallelKwargs(...)] or as "
                    f"strategy={strategy!r}, not both."
                )
            from fabricx.strategies.ddp import DDPStrategy

            strategy = DDPStrategy(**ddp_options(self.ddp_handler), **comm_hook_options(self.ddp_handler))
        compile_models = compile_option(dynamo_backend, dynamo_plugin)
        if gradient_accumulation_plugin is not None:
            if gradient_accumulation_steps != 1:
                raise ValueError("Give either gradient_accumulation_steps or gradient_accumulation_plugin, not both.")
        else:
            gradient_accumulation_plugin = GradientAccumulationPlugin(num_steps=gradient_accumulation_steps)
        plugin = gradient_accumulation_plugin
        num_steps = getattr(plugin, "num_steps", None)
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"gradient_accumulation_plugin.num_steps={num_steps!r}; give an int >= 1.")
        gradient_accumulation_steps = num_steps
        # Accelerate reads the plugin through KwargsHandler.to_kwargs(), which keeps only the fields that
        # differ from their defaults, and then takes adjust_scheduler as False when absent: its default
        # True is lost, so skipped micro-batches are never counted in the scheduler. The same here.
        adjust = getattr(plugin, "adjust_scheduler", True)
        self.gradient_state = GradientState(
            num_steps=num_steps,
            adjust_scheduler=False if adjust is True else bool(adjust),
            sync_with_dataloader=bool(getattr(plugin, "sync_with_dataloader", True)),
        )
        self._sync_each_batch = bool(getattr(plugin, "sync_each_batch", False))
        env_scaling = os.environ.get("FABRICX_ACCELERATE_EXACT_WINDOW_SCALING", "").lower() in ("1", "true", "yes")
        self._exact_window_scaling = exact_window_scaling or env_scaling
        if dataloader_config is None:
            dataloader_config = DataLoaderConfiguration(split_batches=split_batches, even_batches=even_batches)
        elif split_batches or not even_batches:
            raise ValueError(
                "Set split_batches/even_batches in DataLoaderConfiguration, not next to dataloader_config."
            )
        if project_config is None:
            project_config = ProjectConfiguration(project_dir=project_dir)
        elif project_dir is not None:
            project_config.set_directories(project_dir)

        self.project_configuration = project_config
        self.dataloader_config = dataloader_config
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = rng_types
        self._fabric = launched_fabric(
            "This Accelerator",
            cpu=cpu,
            strategy="auto" if strategy is None else strategy,
            precision=fabric_precision(mixed_precision),
            grad_accum_steps=gradient_accumulation_steps,
            compile=compile_models,
        )
        if accelerate_precision_name(self._fabric.precision) != "no":
            # Accelerate autocasts forward but hands the model its inputs as they are (Lightning Fabric,
            # and so fabricx's own API, casts floating inputs to the half dtype first).
            self._fabric.precision.convert_input = _unchanged  # type: ignore[method-assign]
        self._models: list[FabricModule] = []
        self._optimizers: list[FabricOptimizer] = []
        self._schedulers: list[Any] = []
        self._dataloaders: list[AcceleratedDataLoader] = []
        self._custom_objects: list[Any] = []
        self.state = AcceleratorState(mixed_precision=self.mixed_precision, _from=self._fabric)
        self.state.mixed_precision = self.mixed_precision
        self.flag_tensor: Tensor | None = None
        self._accumulate_depth = 0
        self._windows = RunningCount(self.gradient_state, exact_scaling=self._exact_window_scaling)
        self._step_was_skipped = False
        self._log_with = normalize_log_with(log_with)
        self.trackers: list[Any] = []
        self._tracker_names: list[str] = []

    # -- where and how many ------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The `fabricx.Fabric` doing the work."""
        return self._fabric

    @property
    def device(self) -> torch.device:
        return self._fabric.device

    @property
    def num_processes(self) -> int:
        return self._fabric.world_size

    @property
    def process_index(self) -> int:
        return self._fabric.global_rank

    @property
    def local_process_index(self) -> int:
        return self._fabric.local_rank

    @property
    def distributed_type(self) -> DistributedType:
        return self.state.distributed_type

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"`` or ``"bf16"``."""
        return accelerate_precision_name(self._fabric.precision)

    @property
    def native_amp(self) -> bool:
        return self.mixed_precision != "no"

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The grad scaler under ``mixed_precision="fp16"`` (``None`` otherwise)."""
        return getattr(self._fabric.precision, "scaler", None)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step; settable, e.g. inside ``find_executable_batch_size`` to keep
        the total batch size when the per-step one shrinks.

        Example:
            ```python
            accelerator.gradient_accumulation_steps = observed_batch_size // batch_size
            ```
        """
        return self._fabric.grad_accum_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"gradient_accumulation_steps={steps!r}; give an int >= 1.")
        self._fabric.grad_accum_steps = steps
        self.gradient_state.num_steps = steps

    @property
    def sync_gradients(self) -> bool:
        """Whether this micro-batch ends an accumulation window (the optimizer steps)."""
        return self._fabric.sync_gradients

    @property
    def step(self) -> int:
        """Micro-batches counted by `accumulate()` since the last loader end (Accelerate's ``step``)."""
        return self._windows.step

    @step.setter
    def step(self, step: int) -> None:
        self._windows.step = step

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether the last optimizer step was skipped because fp16 gradients overflowed."""
        return self._step_was_skipped

    @property
    def project_dir(self) -> str | os.PathLike[str] | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | os.PathLike[str] | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        """The number the next automatic checkpoint gets (read on this process; no communication)."""
        manager = self._manager()
        iteration = self.project_configuration.iteration
        return iteration if manager is None else max(iteration, manager.iteration)

    # -- prepare -------------------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool | None] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and LR schedulers, in any order; they come back in
        the same order (one object alone when one was given). Anything else passes through unchanged.

        Example:
            ```python
            model, optimizer, loader, scheduler = accelerator.prepare(
                model, optimizer, loader, scheduler
            )
            ```
        """
        if device_placement is not None and len(device_placement) != len(args):
            raise ValueError(
                f"device_placement has {len(device_placement)} entries for {len(args)} objects; give one per object."
            )
        placement = [self.device_placement if d is None else d for d in (device_placement or [None] * len(args))]
        results = list(args)
        models = [i for i, obj in enumerate(args) if isinstance(obj, nn.Module) and not isinstance(obj, FabricModule)]
        optimizers = [
            i for i, obj in enumerate(args) if isinstance(obj, Optimizer) and not isinstance(obj, FabricOptimizer)
        ]
        self._prepare_models_and_optimizers(args, results, models, optimizers, placement)
        for index, obj in enumerate(args):
            if isinstance(obj, DataLoader):
                results[index] = self._prepare_loader(obj, placement[index])
            elif _is_scheduler(obj) and not is_intercepted(obj, "step", tag="accelerate"):
                results[index] = self._prepare_scheduler(obj)
        return results[0] if len(results) == 1 else tuple(results)

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> Any:
        """Prepare one model (see `prepare()`).

        Example:
            ```python
            model = accelerator.prepare_model(model)
            ```
        """
        return self.prepare(model, device_placement=[device_placement])

    def prepare_optimizer(self, optimizer: Optimizer, device_placement: bool | None = None) -> Any:
        """Prepare one optimizer (see `prepare()`).

        Example:
            ```python
            optimizer = accelerator.prepare_optimizer(optimizer)
            ```
        """
        return self.prepare(optimizer, device_placement=[device_placement])

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """Prepare one LR scheduler (see `prepare()`).

        Example:
            ```python
            scheduler = accelerator.prepare_scheduler(scheduler)
            ```
        """
        return self.prepare(scheduler)

    def prepare_data_loader(self, data_loader: DataLoader, device_placement: bool | None = None) -> Any:
        """Prepare one data loader (see `prepare()`).

        Example:
            ```python
            loader = accelerator.prepare_data_loader(loader)
            ```
        """
        return self.prepare(data_loader, device_placement=[device_placement])

    def _prepare_models_and_optimizers(
        self, args: Sequence[Any], results: list[Any], models: list[int], optimizers: list[int], placement: list[bool]
    ) -> None:
        owner_of = {id(p): i for i in models for p in args[i].parameters()}
        assigned: dict[int, list[int]] = {i: [] for i in models}
        loose = []
        for o in optimizers:
            owners = {owner_of.get(id(p)) for group in args[o].param_groups for p in group["params"]}
            owner = owners.pop() if len(owners) == 1 else None
            if owner is not None:
                assigned[owner].append(o)
            else:
                loose.append(o)  # spans several models, or its model was prepared earlier
        for m in models:
            opt_indices = assigned[m]
            if opt_indices:
                out = self._fabric.setup(args[m], *(args[o] for o in opt_indices), move_to_device=placement[m])
                results[m] = answer_as_prepared(out[0])
                for o, prepared in zip(opt_indices, out[1:], strict=True):
                    results[o] = prepared
            else:
                results[m] = answer_as_prepared(self._fabric.setup_module(args[m], move_to_device=placement[m]))
            self._models.append(results[m])
        for o in loose:
            results[o] = self._fabric.setup_optimizers(args[o])
        for o in optimizers:
            self._optimizers.append(self._watch_skipped_steps(results[o]))

    def _watch_skipped_steps(self, optimizer: FabricOptimizer) -> FabricOptimizer:
        scaler = self.scaler
        if scaler is None:
            return optimizer
        fabric_step = type(optimizer).step
        accelerator = self

        def step(opt: Any, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
            if not accelerator._fabric.sync_gradients:
                return None
            before = scaler.get_scale()
            result = fabric_step(opt, closure, **kwargs)
            # The scaler lowers its scale exactly when it skipped the step for inf/NaN gradients.
            accelerator._step_was_skipped = scaler.get_scale() < before
            return result

        # A bound method, as LR schedulers created later expect to wrap one.
        optimizer.step = types.MethodType(step, optimizer)
        return optimizer

    def _prepare_loader(self, loader: DataLoader, device_placement: bool) -> AcceleratedDataLoader:
        config = self.dataloader_config
        options = LoaderOptions(
            num_processes=self.num_processes,
            process_index=self.process_index,
            device=self.device if device_placement else None,
            split_batches=config.split_batches,
            even_batches=config.even_batches,
            dispatch_batches=config.dispatch_batches,
            use_seedable_sampler=config.use_seedable_sampler,
            data_seed=config.data_seed,
            non_blocking=config.non_blocking,
            iterator_at_prepare=config.use_stateful_dataloader,
        )
        prepared = AcceleratedDataLoader(loader, options, self.gradient_state)
        prepared.on_batch = self._fabric.accumulation_state.set_active_loader
        self._dataloaders.append(prepared)
        return prepared

    def _prepare_scheduler(self, scheduler: Any) -> Any:
        cls = user_class(scheduler)

        def step(sched: Any, _original: Any, *args: Any, **kwargs: Any) -> Any:
            return self._step_scheduler(sched, cls, *args, **kwargs)

        # The shared mechanism: isinstance holds, the scheduler's own state_dict stays clean, it pickles.
        intercept_method(scheduler, "step", step, tag="accelerate")
        self._schedulers.append(scheduler)
        return scheduler

    def _step_scheduler(self, scheduler: Any, cls: type, *args: Any, **kwargs: Any) -> Any:
        if not self.step_scheduler_with_optimizer:
            return cls.step(scheduler, *args, **kwargs)
        if not self._fabric.sync_gradients:
            if self.gradient_state.adjust_scheduler:
                count_scheduler_step(scheduler)
            return None
        if self._step_was_skipped:
            return None
        if self.dataloader_config.split_batches:
            return cls.step(scheduler, *args, **kwargs)
        # Accelerate's convention: one step per process, so a schedule written for the
        # single-process number of batches ends at the same point.
        for _ in range(self.num_processes):
            total = getattr(scheduler, "total_steps", None)
            if total is not None and scheduler_step_count(scheduler) > total:
                break
            cls.step(scheduler, *args, **kwargs)
        return None

    # -- the step --------------------------------------------------------------------------------------
    def backward(self, loss: Tensor, **kwargs: Any) -> None:
        """Backward through the precision and strategy (loss scaling, gradient sync).

        The loss is divided by ``gradient_accumulation_steps``, as Accelerate does (with
        ``exact_window_scaling=True``, inside `accumulate()`, by the real length of the current window).

        Example:
            ```python
            accelerator.backward(loss)
            ```
        """
        steps = self.gradient_accumulation_steps
        if steps > 1 and not (self._exact_window_scaling and self._accumulate_depth):
            # Accelerate's division; the window's own divisor is 1 then (see RunningCount.loss_divisor).
            loss = loss / steps
        self._fabric.backward(loss, **kwargs)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Generator[None, None, None]:
        """One micro-batch of gradient accumulation: off a window boundary gradients are not synced and
        prepared optimizers/schedulers do nothing on ``step()``/``zero_grad()``.

        Example:
            ```python
            with accelerator.accumulate(model):
                accelerator.backward(loss_fn(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
            ```
        """
        models = models or tuple(self._models[:1])
        if not models:
            raise FabricxError("accumulate() needs a model returned by accelerator.prepare(); prepare one first.")
        for model in models:
            if not isinstance(model, FabricModule):
                raise TypeError(
                    f"accumulate() needs the models returned by accelerator.prepare(), got {type(model).__name__}."
                )
        accumulation = self._fabric.accumulation_state
        boundary = accumulation.begin(self._windows)
        self.gradient_state._set_sync_gradients(boundary)
        try:
            with contextlib.ExitStack() as stack:
                if not boundary and not self._sync_each_batch:
                    for model in models:
                        stack.enter_context(self._fabric.no_backward_sync(model))
                self._accumulate_depth += 1
                try:
                    yield
                finally:
                    self._accumulate_depth -= 1
        finally:
            accumulation.end(boundary)

    @contextlib.contextmanager
    def trigger_sync_in_backward(self, model: nn.Module) -> Generator[None, None, None]:
        """Make the next ``backward`` synchronise gradients even though the forward ran under
        `no_sync()` (several forwards, then several backwards, syncing on the last).

        Example:
            ```python
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(last_loss)
            ```
        """
        ddp = ddp_of(model)
        if ddp is None:
            yield
            return
        before = (ddp.require_backward_grad_sync, ddp.require_forward_param_sync)
        ddp.require_backward_grad_sync = True
        ddp.require_forward_param_sync = False
        ddp.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            ddp.require_backward_grad_sync, ddp.require_forward_param_sync = before

    @contextlib.contextmanager
    def join_uneven_inputs(self, joinables: list[Any], even_batches: bool | None = None) -> Generator[Any, None, None]:
        """Let processes with fewer batches finish early without hanging the others' gradient syncs
        (with ``even_batches=False``); ``even_batches`` overrides the prepared loaders' setting inside.

        Example:
            ```python
            with accelerator.join_uneven_inputs([model], even_batches=False):
                for batch in loader: ...
            ```
        """
        if self.state.distributed_type not in _MULTI_PROCESS_TYPES:
            warnings.warn(
                "Joining uneven inputs is only supported for multi-GPU/multi-CPU DDP training "
                f"(this run is {self.state.distributed_type.value}); join_uneven_inputs has no effect.",
                UserWarning,
                stacklevel=3,
            )
            yield joinables
            return
        from torch.distributed.algorithms.join import Join

        overridden = []
        if even_batches is not None:
            shards = [getattr(dl, "batch_sampler", None) for dl in self._dataloaders]
            if any(not hasattr(shard, "even_batches") for shard in shards):
                warnings.warn(
                    "Overriding even_batches is only supported for map-style datasets, yet some dataloaders "
                    "given were iterable; their batches stay as prepared.",
                    UserWarning,
                    stacklevel=3,
                )
            for shard in shards:
                if shard is not None and hasattr(shard, "even_batches"):
                    overridden.append((shard, getattr(shard, "even_batches")))  # noqa: B009 - checked above
                    setattr(shard, "even_batches", even_batches)  # noqa: B010
        ddps: list[Any] = [d for d in (ddp_of(j) for j in joinables) if d is not None]  # DDP is a Joinable
        try:
            with Join(ddps, enable=True, throw_on_early_termination=False):
                yield joinables
        finally:
            for shard, value in overridden:
                shard.even_batches = value

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """Skip gradient synchronisation in ``backward`` inside the block.

        Example:
            ```python
            with accelerator.no_sync(model):
                accelerator.backward(loss)
            ```
        """
        return self._fabric.no_backward_sync(model)

    def unscale_gradients(self, optimizer: Optimizer | list[Optimizer] | None = None) -> None:
        """Divide fp16 gradients by the loss scale now (before inspecting or clipping them).

        Example:
            ```python
            accelerator.unscale_gradients()
            grad_norm = torch.linalg.vector_norm(model.weight.grad)
            ```
        """
        if optimizer is None:
            targets: list[Any] = list(self._optimizers)
        else:
            targets = list(optimizer) if isinstance(optimizer, list | tuple) else [optimizer]
        for opt in targets:
            self._fabric.precision.unscale_gradients(unwrap(opt))

    def clip_grad_norm_(
        self, parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2
    ) -> Tensor | None:
        """Clip the gradients' total norm (after unscaling fp16 gradients); returns the norm before clipping.

        Off an accumulation boundary the gradients are still incomplete: nothing is clipped and ``None``
        is returned.

        Example:
            ```python
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            ```
        """
        return self._clip(parameters, max_norm=max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[Tensor] | Tensor, clip_value: float) -> None:
        """Clip every gradient element to ``[-clip_value, clip_value]`` (after unscaling fp16 gradients).

        Example:
            ```python
            accelerator.clip_grad_value_(model.parameters(), 0.5)
            ```
        """
        self._clip(parameters, clip_val=clip_value)

    def _clip(self, parameters: Iterable[Tensor] | Tensor, **how: Any) -> Tensor | None:
        if not self._fabric.sync_gradients:
            return None
        params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
        wanted = {id(p) for p in params}
        owners = [o for o in self._optimizers if wanted & {id(p) for g in o.param_groups for p in g["params"]}]
        if len(owners) == 1:
            held = {id(p) for g in owners[0].param_groups for p in g["params"]}
            model = next((m for m in self._models if {id(p) for p in m.parameters()} >= wanted), None)
            if held == wanted and model is not None:
                # The strategy clips (possibly sharded) gradients of exactly these parameters.
                return self._fabric.clip_gradients(model, owners[0], error_if_nonfinite=False, **how)
        for opt in owners:
            self._fabric.precision.unscale_gradients(unwrap(opt))
        if "max_norm" in how:
            return torch.nn.utils.clip_grad_norm_(params, how["max_norm"], norm_type=how["norm_type"])
        torch.nn.utils.clip_grad_value_(params, how["clip_val"])
        return None

    def profile(self, profile_handler: Any = None) -> contextlib.AbstractContextManager:
        """Profile the block with ``torch.profiler`` (the ``ProfileKwargs`` given here, else the one in
        ``kwargs_handlers``, else the defaults); with ``output_trace_dir`` every process writes
        ``profile_<process_index>.json`` there (a Chrome trace) when the block ends.

        Example:
            ```python
            with accelerator.profile() as prof:
                train_step()
            print(prof.key_averages().table())
            ```
        """
        return profile_context(self, profile_handler or self.profile_handler or ProfileKwargs())

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """The mixed-precision context for computation outside the model's ``forward``.

        Example:
            ```python
            with accelerator.autocast():
                loss = complex_loss_function(outputs, target)
            ```
        """
        return self._fabric.autocast()

    # -- processes ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def main_process_first(self) -> Generator[None, None, None]:
        """Run the block on the main process first, then on the others.

        Example:
            ```python
            with accelerator.main_process_first():
                dataset = load_and_cache(...)
            ```
        """
        with self._fabric.rank_zero_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Generator[None, None, None]:
        """Run the block on each machine's main process first, then on the others.

        Example:
            ```python
            with accelerator.local_main_process_first():
                dataset = load_and_cache(...)
            ```
        """
        with self._fabric.rank_zero_first(local=True):
            yield

    def set_trigger(self) -> None:
        """Raise a flag on this process that `check_trigger()` sees on every process (e.g. to stop early).

        Example:
            ```python
            if loss.isnan():
                accelerator.set_trigger()
            if accelerator.check_trigger():
                break
            ```
        """
        self.flag_tensor = torch.tensor(1, device=self.device)

    def check_trigger(self) -> bool:
        """Whether any process called `set_trigger()` since the last check (every process must call
        it; the flag is lowered again).

        Example:
            ```python
            if accelerator.check_trigger():
                break
            ```
        """
        if self.flag_tensor is None:
            self.flag_tensor = torch.tensor(0, device=self.device)
        raised = self.reduce(self.flag_tensor, reduction="sum")
        if int(raised.item()) >= 1:
            self.flag_tensor = torch.tensor(0, device=self.device)
            return True
        return False

    # -- tracking ---------------------------------------------------------------------------------------
    def init_trackers(
        self, project_name: str, config: dict[str, Any] | None = None, init_kwargs: dict[str, Any] | None = None
    ) -> None:
        """Create the ``log_with`` trackers (on the main process) and record ``config`` as hyperparameters.

        Example:
            ```python
            accelerator.init_trackers("my_project", config={"lr": 1e-3})
            ```
        """
        if not self.is_main_process:
            return
        self.trackers = build_trackers(self._log_with, self.logging_dir, project_name, init_kwargs or {})
        self._tracker_names = [n if isinstance(n, str) else type(n).__name__ for n in self._log_with]
        if config is not None:
            for tracker in self.trackers:
                tracker.log_hyperparams(config)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker created for ``name`` (``"csv"``, ``"tensorboard"``).

        Example:
            ```python
            accelerator.get_tracker("tensorboard").log_metrics({"loss": 0.1}, step=1)
            ```
        """
        for tracker_name, tracker in zip(self._tracker_names, self.trackers, strict=True):
            if tracker_name == name:
                return tracker.experiment if unwrap and hasattr(tracker, "experiment") else tracker
        raise ValueError(f"No tracker named {name!r}; this Accelerator has {self._tracker_names}.")

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> None:
        """Log metrics to every tracker (main process only).

        Example:
            ```python
            accelerator.log({"train_loss": loss.item()}, step=step)
            ```
        """
        if not self.is_main_process:
            return
        for tracker in self.trackers:
            tracker.log_metrics(values, step=step)

    def end_training(self) -> None:
        """Finish and close the trackers and release the process group; every process must call it last.

        Example:
            ```python
            accelerator.end_training()
            ```
        """
        for tracker in self.trackers:
            tracker.finalize("success")
        self.wait_for_everyone()
        # As Accelerate's end_training: the process group goes (and gloo's threads settle) here, so the
        # process can exit cleanly right after.
        from fabricx.utilities.process_group import release_process_group

        release_process_group(wait_for_peers=False)

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget prepared objects (and collect garbage); returns ``objects`` as ``None`` placeholders.

        Example:
            ```python
            model, optimizer = accelerator.free_memory(model, optimizer)
            ```
        """
        self._models.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return [None for _ in objects]

    clear = free_memory

    def __getstate__(self) -> dict[str, Any]:
        # The configuration and process state pickle; the live training objects do not.
        keep = ("project_configuration", "dataloader_config", "device_placement", "step_scheduler_with_optimizer")
        state = {name: self.__dict__[name] for name in keep if name in self.__dict__}
        state["state"] = AcceleratorState.__new__(AcceleratorState)
        state["state"].__dict__ = dict(vars(self.state))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"Accelerator(device={self.device}, num_processes={self.num_processes}, "
            f"mixed_precision={self.mixed_precision!r}, gradient_accumulation_steps={self.gradient_accumulation_steps})"
        )
