"""An Accelerate-compatible ``Accelerator`` implemented over :class:`fabricx.Fabric`.

A script written for Hugging Face Accelerate switches with one import line::

    from fabricx.compat.accelerate import Accelerator

Start it with ``python script.py`` (one process) or ``fabricx run --devices 2 script.py`` /
``torchrun --nproc-per-node 2 script.py`` (several processes).

Where Accelerate's behaviour is wrong, this adapter is right:

* automatic checkpoint numbers keep counting after a restart (one past the highest on disk) and
  ``load_state()`` picks the numerically newest complete checkpoint;
* a stateful loader reports the loaded position right after ``load_state()``;
* the last, shorter gradient-accumulation window of an epoch is scaled by its real length;
* a shuffled loader resumes its exact order, in one process as in many, replaying nothing;
* ``mixed_precision="fp16"`` on CPU runs with the CPU grad scaler instead of being ignored.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import types
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader

from fabricx.compat.accelerate_collectives import CollectivesMixin
from fabricx.compat.accelerate_config import (
    DataLoaderConfiguration,
    DistributedType,
    ProjectConfiguration,
    accelerate_precision_name,
    fabric_precision,
)
from fabricx.compat.accelerate_data import (
    AcceleratedDataLoader,
    SkipBatchesLoader,
    _ActiveLoaders,
)
from fabricx.compat.accelerate_state import StateMixin
from fabricx.compat.accelerate_tracking import build_trackers, normalize_log_with
from fabricx.fabric import Fabric
from fabricx.utilities import seed as _seed
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.wrappers import FabricModule, FabricOptimizer, unwrap

__all__ = [
    "Accelerator",
    "DataLoaderConfiguration",
    "DistributedType",
    "ProjectConfiguration",
    "set_seed",
    "skip_first_batches",
]


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (and dataloader workers) like ``accelerate.utils.set_seed``.

    ``device_specific=True`` adds the process index, so processes draw different numbers;
    ``deterministic=True`` also asks torch for deterministic algorithms.

    Example::

        set_seed(42)
    """
    if device_specific:
        seed += int(os.environ.get("RANK", 0))
    _seed.seed_everything(seed, workers=True)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> SkipBatchesLoader:
    """Iterate ``dataloader`` without its first ``num_batches`` batches (see
    :meth:`Accelerator.skip_first_batches`).

    Example::

        for batch in skip_first_batches(loader, 10): ...
    """
    return SkipBatchesLoader(dataloader, num_batches)


def _externally_launched() -> bool:
    """Whether torchrun / ``fabricx run`` started this process as one of several."""
    from fabricx.environments.torchelastic import TorchElasticEnvironment

    return "FABRICX_DEVICES" in os.environ or TorchElasticEnvironment.detect()


def _is_scheduler(obj: Any) -> bool:
    return isinstance(obj, LRScheduler) or (
        hasattr(obj, "step") and hasattr(obj, "state_dict") and isinstance(getattr(obj, "optimizer", None), Optimizer)
    )


class Accelerator(StateMixin, CollectivesMixin):
    """Hugging Face Accelerate's ``Accelerator`` on top of :class:`fabricx.Fabric`.

    Args:
        mixed_precision: ``None`` (the environment decides, else full precision), ``"no"``, ``"fp16"``
            (autocast + grad scaler, on CUDA or CPU) or ``"bf16"``.
        gradient_accumulation_steps: micro-batches per optimizer step inside :meth:`accumulate`.
        cpu: run on the CPU even when a GPU is present.
        project_config: a :class:`ProjectConfiguration` (checkpoint folder, automatic naming, retention).
        dataloader_config: a :class:`DataLoaderConfiguration` (``use_stateful_dataloader=True`` to resume
            loaders mid-epoch).
        log_with: ``"csv"``, ``"tensorboard"``, ``"all"``, a fabricx logger, or a list of them.
        project_dir: shortcut for ``ProjectConfiguration(project_dir=...)``.
        device_placement: move prepared models and batches to :attr:`device`.
        step_scheduler_with_optimizer: step prepared schedulers only when the optimizer steps, once per
            process (Accelerate's convention for schedules counted in single-process batches).
        split_batches, even_batches: only the defaults (``False``, ``True``) are supported.
        rng_types: accepted for compatibility; every random generator is checkpointed.

    Example::

        accelerator = Accelerator(gradient_accumulation_steps=2, mixed_precision="bf16")
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        for inputs, targets in loader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
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
        even_batches: bool = True,
    ) -> None:
        for name, value in (
            ("deepspeed_plugin", deepspeed_plugin),
            ("fsdp_plugin", fsdp_plugin),
            ("megatron_lm_plugin", megatron_lm_plugin),
        ):
            if value is not None:
                raise MisconfigurationError(
                    f"{name} is an Accelerate object fabricx cannot read. Use fabricx.Fabric(strategy=...) "
                    "directly for FSDP/DeepSpeed, or drop the plugin."
                )
        if kwargs_handlers:
            raise MisconfigurationError(
                f"kwargs_handlers={kwargs_handlers!r} are Accelerate objects fabricx cannot read. Drop them, "
                "or use fabricx.Fabric(strategy=DDPStrategy(...)) to pass DDP or scaler options."
            )
        if dynamo_backend not in (None, "no", "NO"):
            raise MisconfigurationError(
                f"dynamo_backend={dynamo_backend!r} is not supported; call torch.compile(model) yourself."
            )
        if gradient_accumulation_plugin is not None:
            num_steps = getattr(gradient_accumulation_plugin, "num_steps", None)
            if gradient_accumulation_steps != 1 or not isinstance(num_steps, int):
                raise MisconfigurationError(
                    "Pass gradient_accumulation_steps=N instead of gradient_accumulation_plugin."
                )
            gradient_accumulation_steps = num_steps
        if dataloader_config is None:
            dataloader_config = DataLoaderConfiguration(split_batches=split_batches, even_batches=even_batches)
        elif split_batches or not even_batches:
            raise MisconfigurationError(
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
        self._fabric = Fabric(
            accelerator="cpu" if cpu else "auto",
            devices="auto" if _externally_launched() else 1,
            precision=fabric_precision(mixed_precision),
            grad_accum_steps=gradient_accumulation_steps,
        )
        if self._fabric.strategy.launcher is not None:
            raise FabricxError(
                "This Accelerator needs several processes but none were started for it. Start the script with "
                "`fabricx run --devices N script.py` or `torchrun --nproc-per-node N script.py`."
            )
        self._fabric.launch()
        self._models: list[FabricModule] = []
        self._optimizers: list[FabricOptimizer] = []
        self._schedulers: list[Any] = []
        self._dataloaders: list[AcceleratedDataLoader] = []
        self._custom_objects: list[Any] = []
        self._active_loaders = _ActiveLoaders()
        self._accumulate_depth = 0
        self._step_was_skipped = False
        self._log_with = normalize_log_with(log_with)
        self.trackers: list[Any] = []
        self._tracker_names: list[str] = []

    # -- where and how many ------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The :class:`fabricx.Fabric` doing the work."""
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
    def is_main_process(self) -> bool:
        return self._fabric.is_global_zero

    @property
    def is_local_main_process(self) -> bool:
        return self._fabric.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def distributed_type(self) -> DistributedType:
        name = getattr(self._fabric.strategy, "strategy_name", "")
        if self.num_processes == 1 and not name.startswith(("fsdp", "deepspeed")):
            return DistributedType.NO
        if name.startswith("fsdp"):
            return DistributedType.FSDP
        if name.startswith("deepspeed"):
            return DistributedType.DEEPSPEED
        device_type = self.device.type
        if device_type == "cuda":
            return DistributedType.MULTI_GPU
        if device_type == "xla":
            return DistributedType.XLA
        return DistributedType.MULTI_MPS if device_type == "mps" else DistributedType.MULTI_CPU

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
        return self._fabric.grad_accum_steps

    @property
    def sync_gradients(self) -> bool:
        """Whether this micro-batch ends an accumulation window (the optimizer steps)."""
        return self._fabric.sync_gradients

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
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare models, optimizers, data loaders and LR schedulers, in any order; they come back in
        the same order (one object alone when one was given). Anything else passes through unchanged.

        Example::

            model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
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
            elif _is_scheduler(obj) and not getattr(obj, "_fabricx_accelerate_scheduler", False):
                results[index] = self._prepare_scheduler(obj)
        return results[0] if len(results) == 1 else tuple(results)

    def prepare_model(
        self, model: nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> Any:
        """Prepare one model (see :meth:`prepare`).

        Example::

            model = accelerator.prepare_model(model)
        """
        return self.prepare(model, device_placement=[device_placement])

    def prepare_optimizer(self, optimizer: Optimizer, device_placement: bool | None = None) -> Any:
        """Prepare one optimizer (see :meth:`prepare`).

        Example::

            optimizer = accelerator.prepare_optimizer(optimizer)
        """
        return self.prepare(optimizer, device_placement=[device_placement])

    def prepare_scheduler(self, scheduler: Any) -> Any:
        """Prepare one LR scheduler (see :meth:`prepare`).

        Example::

            scheduler = accelerator.prepare_scheduler(scheduler)
        """
        return self.prepare(scheduler)

    def prepare_data_loader(self, data_loader: DataLoader, device_placement: bool | None = None) -> Any:
        """Prepare one data loader (see :meth:`prepare`).

        Example::

            loader = accelerator.prepare_data_loader(loader)
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
            if len(owners) == 1 and None not in owners:
                assigned[owners.pop()].append(o)
            else:
                loose.append(o)  # spans several models, or its model was prepared earlier
        for m in models:
            opt_indices = assigned[m]
            if opt_indices:
                out = self._fabric.setup(args[m], *(args[o] for o in opt_indices), move_to_device=placement[m])
                results[m] = out[0]
                for o, prepared in zip(opt_indices, out[1:], strict=True):
                    results[o] = prepared
            else:
                results[m] = self._fabric.setup_module(args[m], move_to_device=placement[m])
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
        inner = self._fabric.setup_dataloaders(loader, move_to_device=device_placement)
        prepared = AcceleratedDataLoader(inner, self._active_loaders, self.num_processes)
        self._dataloaders.append(prepared)
        return prepared

    def _prepare_scheduler(self, scheduler: Any) -> Any:
        cls = scheduler.__class__
        accelerator = self

        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            return accelerator._step_scheduler(self, cls, *args, **kwargs)

        # A subclass, so isinstance holds and the scheduler's own state_dict stays clean.
        scheduler.__class__ = type(cls.__name__, (cls,), {"step": step, "_fabricx_accelerate_scheduler": True})
        self._schedulers.append(scheduler)
        return scheduler

    def _step_scheduler(self, scheduler: Any, cls: type, *args: Any, **kwargs: Any) -> Any:
        if not self.step_scheduler_with_optimizer:
            return cls.step(scheduler, *args, **kwargs)
        if not self._fabric.sync_gradients or self._step_was_skipped:
            return None
        # Accelerate's convention: one step per process, so a schedule written for the
        # single-process number of batches ends at the same point.
        for _ in range(self.num_processes):
            total = getattr(scheduler, "total_steps", None)
            if total is not None and scheduler._step_count > total:
                break
            cls.step(scheduler, *args, **kwargs)
        return None

    # -- the step --------------------------------------------------------------------------------------
    def backward(self, loss: Tensor, **kwargs: Any) -> None:
        """Backward through the precision and strategy (loss scaling, gradient sync).

        Inside :meth:`accumulate` the loss is divided by the real length of the current window; outside
        it, by ``gradient_accumulation_steps`` as Accelerate does.

        Example::

            accelerator.backward(loss)
        """
        steps = self.gradient_accumulation_steps
        if steps > 1 and self._accumulate_depth == 0:
            loss = loss / steps
        self._fabric.backward(loss, **kwargs)

    @contextlib.contextmanager
    def accumulate(self, *models: nn.Module) -> Generator[None, None, None]:
        """One micro-batch of gradient accumulation: off a window boundary gradients are not synced and
        prepared optimizers/schedulers do nothing on ``step()``/``zero_grad()``.

        Example::

            with accelerator.accumulate(model):
                accelerator.backward(loss_fn(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
        """
        models = models or tuple(self._models[:1])
        if not models:
            raise FabricxError("accumulate() needs a model returned by accelerator.prepare(); prepare one first.")
        for model in models:
            if not isinstance(model, FabricModule):
                raise TypeError(
                    f"accumulate() needs the models returned by accelerator.prepare(), got {type(model).__name__}."
                )
        with self._fabric.accumulate(models[0]), contextlib.ExitStack() as stack:
            if not self._fabric.sync_gradients:
                for model in models[1:]:
                    stack.enter_context(self._fabric.no_backward_sync(model))
            self._accumulate_depth += 1
            try:
                yield
            finally:
                self._accumulate_depth -= 1

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """Skip gradient synchronisation in ``backward`` inside the block.

        Example::

            with accelerator.no_sync(model):
                accelerator.backward(loss)
        """
        return self._fabric.no_backward_sync(model)

    def unscale_gradients(self, optimizer: Optimizer | list[Optimizer] | None = None) -> None:
        """Divide fp16 gradients by the loss scale now (before inspecting or clipping them).

        Example::

            accelerator.unscale_gradients()
            grad_norm = torch.linalg.vector_norm(model.weight.grad)
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

        Example::

            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
        """
        return self._clip(parameters, max_norm=max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[Tensor] | Tensor, clip_value: float) -> None:
        """Clip every gradient element to ``[-clip_value, clip_value]`` (after unscaling fp16 gradients).

        Example::

            accelerator.clip_grad_value_(model.parameters(), 0.5)
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

    def autocast(self, autocast_handler: Any = None) -> contextlib.AbstractContextManager:
        """The mixed-precision context for computation outside the model's ``forward``.

        Example::

            with accelerator.autocast():
                loss = complex_loss_function(outputs, target)
        """
        return self._fabric.autocast()

    # -- processes ---------------------------------------------------------------------------------------

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine (on the local main process).

        Example::

            accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")
        """
        if self.is_local_main_process:
            print(*args, **kwargs)

    @contextlib.contextmanager
    def main_process_first(self) -> Generator[None, None, None]:
        """Run the block on the main process first, then on the others.

        Example::

            with accelerator.main_process_first():
                dataset = load_and_cache(...)
        """
        with self._fabric.rank_zero_first():
            yield

    @contextlib.contextmanager
    def local_main_process_first(self) -> Generator[None, None, None]:
        """Run the block on each machine's main process first, then on the others.

        Example::

            with accelerator.local_main_process_first():
                dataset = load_and_cache(...)
        """
        with self._fabric.rank_zero_first(local=True):
            yield

    def on_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on the main process only.

        Example::

            @accelerator.on_main_process
            def report(text): print(text)
        """

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if self.is_main_process else None

        return wrapper

    def on_local_main_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: run ``function`` on each machine's main process only.

        Example::

            @accelerator.on_local_main_process
            def report(text): print(text)
        """

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if self.is_local_main_process else None

        return wrapper

    # -- tracking ---------------------------------------------------------------------------------------
    def init_trackers(
        self, project_name: str, config: dict[str, Any] | None = None, init_kwargs: dict[str, Any] | None = None
    ) -> None:
        """Create the ``log_with`` trackers (on the main process) and record ``config`` as hyperparameters.

        Example::

            accelerator.init_trackers("my_project", config={"lr": 1e-3})
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

        Example::

            accelerator.get_tracker("tensorboard").log_metrics({"loss": 0.1}, step=1)
        """
        for tracker_name, tracker in zip(self._tracker_names, self.trackers, strict=True):
            if tracker_name == name:
                return tracker.experiment if unwrap and hasattr(tracker, "experiment") else tracker
        raise ValueError(f"No tracker named {name!r}; this Accelerator has {self._tracker_names}.")

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> None:
        """Log metrics to every tracker (main process only).

        Example::

            accelerator.log({"train_loss": loss.item()}, step=step)
        """
        if not self.is_main_process:
            return
        for tracker in self.trackers:
            tracker.log_metrics(values, step=step)

    def end_training(self) -> None:
        """Finish and close the trackers; every process must call it.

        Example::

            accelerator.end_training()
        """
        for tracker in self.trackers:
            tracker.finalize("success")
        self.wait_for_everyone()

    def free_memory(self, *objects: Any) -> list[Any]:
        """Forget prepared objects (and collect garbage); returns ``objects`` as ``None`` placeholders.

        Example::

            model, optimizer = accelerator.free_memory(model, optimizer)
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

    def __repr__(self) -> str:
        return (
            f"Accelerator(device={self.device}, num_processes={self.num_processes}, "
            f"mixed_precision={self.mixed_precision!r}, gradient_accumulation_steps={self.gradient_accumulation_steps})"
        )
