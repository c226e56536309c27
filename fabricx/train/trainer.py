"""``Trainer``: drives a :class:`~fabricx.train.TrainModule` through a :class:`~fabricx.Fabric`."""

from __future__ import annotations

import math
import os
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fabricx.fabric import Fabric
from fabricx.train import checkpointing as ckpt
from fabricx.train.eval_loop import run_evaluation, run_prediction
from fabricx.train.fit_loop import extract_loss, run_fit_loop
from fabricx.train.hooks import Hooks
from fabricx.train.logging_result import ResultCollection
from fabricx.train.module import TrainModule
from fabricx.train.optimizers import SchedulerConfig, parse_optimizers
from fabricx.train.step_call import step_caller
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.utilities.rng import capture_rng_states, restore_rng_states
from fabricx.utilities.seed import seed_everything
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.wrappers import FabricModule


class Trainer:
    """Fit, validate, test and predict with a :class:`TrainModule` on any hardware, strategy and precision.

    The Fabric flags (``accelerator``, ``strategy``, ``devices``, ``num_nodes``, ``precision``,
    ``plugins``) mean what they mean for :class:`~fabricx.Fabric`; the Trainer builds one and runs
    every process's work through it (``strategy="ddp_spawn"`` starts the processes in ``fit``).

    Args:
        max_epochs: Stop after this many epochs (``-1``: no limit; default 1000 unless ``max_steps`` is set).
        max_steps: Stop after this many optimizer steps (``-1``: no limit).
        grad_accum_steps: Micro-batches per optimizer step (the last window of an epoch may be shorter).
        gradient_clip_val: Clip gradients at this norm (or value, see ``gradient_clip_algorithm``).
        gradient_clip_algorithm: ``"norm"`` or ``"value"``.
        val_check_interval: Validate every N training batches (int), at a fraction of each epoch (float),
            or at the end of each epoch (``None``).
        check_val_every_n_epoch: Validate in every N-th epoch (``None``: every epoch that reaches the interval).
        limit_train_batches, limit_val_batches, limit_test_batches, limit_predict_batches: Use at most N
            batches (int) or a fraction (float) of each loader per epoch.
        num_sanity_val_steps: Validation batches run before training to find bugs early (``-1``: all);
            they change no state, random generators included.
        log_every_n_steps: Send step metrics to the loggers every N optimizer steps.
        callbacks: A callback or a list; a progress bar, a model summary and a ModelCheckpoint are added
            unless disabled or given.
        loggers: A logger or a list; ``None`` gives a CSVLogger under ``default_root_dir``; ``False`` none.
        default_root_dir: Where logs and checkpoints go by default (the working directory).
        enable_progress_bar, enable_model_summary: Add the default RichProgressBar / RichModelSummary.
        enable_checkpointing: Add the default ``ModelCheckpoint(save_last=True, save_top_k=0)`` (a
            ``last`` checkpoint in ``default_root_dir/checkpoints`` at each epoch end).
        seed: ``seed_everything(seed)`` now (build the module afterwards for a seeded initialisation)
            and in every process the Trainer starts.

    Example::

        trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=5, seed=0)
        trainer.fit(MyModule(), train_loader, val_loader)
        trainer.fit(MyModule(), train_loader, val_loader, ckpt_path="last")  # resumes exactly
    """

    def __init__(
        self,
        *,
        accelerator: Any = "auto",
        strategy: Any = "auto",
        devices: Any = "auto",
        num_nodes: int = 1,
        precision: str | int | None = None,
        plugins: Any = None,
        max_epochs: int | None = None,
        max_steps: int = -1,
        grad_accum_steps: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str = "norm",
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        num_sanity_val_steps: int = 2,
        log_every_n_steps: int = 50,
        callbacks: Any = None,
        loggers: Any = None,
        default_root_dir: str | os.PathLike | None = None,
        enable_progress_bar: bool = True,
        enable_model_summary: bool = True,
        enable_checkpointing: bool = True,
        seed: int | None = None,
    ) -> None:
        _check_int("max_steps", max_steps, minimum=-1)
        if max_epochs is not None:
            _check_int("max_epochs", max_epochs, minimum=-1)
        elif max_steps == -1:
            max_epochs = 1000
        if gradient_clip_val is not None and (
            isinstance(gradient_clip_val, bool)
            or not isinstance(gradient_clip_val, (int, float))
            or gradient_clip_val < 0
        ):
            raise MisconfigurationError(f"gradient_clip_val={gradient_clip_val!r}; give a number >= 0 or None.")
        if gradient_clip_algorithm not in ("norm", "value"):
            raise MisconfigurationError(
                f"gradient_clip_algorithm={gradient_clip_algorithm!r}; allowed are 'norm' and 'value'."
            )
        if val_check_interval is not None:
            if isinstance(val_check_interval, bool) or not isinstance(val_check_interval, (int, float)):
                raise MisconfigurationError(
                    f"val_check_interval={val_check_interval!r}; give an int (batches), a float in (0, 1] "
                    "(fraction of an epoch) or None (end of each epoch)."
                )
            if isinstance(val_check_interval, float) and not 0.0 < val_check_interval <= 1.0:
                raise MisconfigurationError(f"val_check_interval={val_check_interval} must be in (0, 1] as a float.")
            if isinstance(val_check_interval, int) and val_check_interval < 1:
                raise MisconfigurationError(f"val_check_interval={val_check_interval} must be >= 1 as an int.")
        if check_val_every_n_epoch is not None:
            _check_int("check_val_every_n_epoch", check_val_every_n_epoch, minimum=1)
        for name, value in (
            ("limit_train_batches", limit_train_batches),
            ("limit_val_batches", limit_val_batches),
            ("limit_test_batches", limit_test_batches),
            ("limit_predict_batches", limit_predict_batches),
        ):
            _check_limit(name, value)
        _check_int("num_sanity_val_steps", num_sanity_val_steps, minimum=-1)
        _check_int("log_every_n_steps", log_every_n_steps, minimum=1)

        self.default_root_dir = os.fspath(default_root_dir) if default_root_dir is not None else os.getcwd()
        self.seed = seed
        if seed is not None:
            seed_everything(seed)
        self._loggers = self._build_loggers(loggers)
        self._fabric = _TrainerFabric(
            accelerator=accelerator,
            strategy=strategy,
            devices=devices,
            num_nodes=num_nodes,
            precision=precision,
            plugins=plugins,
            loggers=self._loggers,
            grad_accum_steps=grad_accum_steps,
        )
        launcher = self._fabric.strategy.launcher
        # Processes started by the Trainer itself (spawn/fork) send their results back to this one.
        self._spawns = bool(launcher is not None and getattr(launcher, "requires_function", False))

        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.gradient_clip_val = gradient_clip_val
        self.gradient_clip_algorithm = gradient_clip_algorithm
        self.val_check_interval = val_check_interval
        self.check_val_every_n_epoch = check_val_every_n_epoch
        self.limit_train_batches = limit_train_batches
        self.limit_val_batches = limit_val_batches
        self.limit_test_batches = limit_test_batches
        self.limit_predict_batches = limit_predict_batches
        self.num_sanity_val_steps = num_sanity_val_steps
        self.log_every_n_steps = log_every_n_steps
        self.callbacks = self._build_callbacks(
            callbacks, enable_progress_bar, enable_model_summary, enable_checkpointing
        )

        # progress
        self.global_step = 0
        self.current_epoch = 0
        self.should_stop = False
        self.sanity_checking = False
        self.is_last_batch = False
        self.state = "initializing"
        self._epoch_done = False
        self._resume_mid_epoch = False
        self._stepped = False
        self._validated_this_epoch_end = False
        self._epoch_metrics: dict[str, Any] = {}
        self._epoch_prog_bar: dict[str, Any] = {}
        self._last_loss: Tensor | None = None

        # set up per run
        self._module: TrainModule | None = None
        self._model: FabricModule | None = None
        self._wrapped: dict[int, FabricModule] = {}
        self._optimizers: list[Any] = []
        self._scheduler_configs: list[SchedulerConfig] = []
        self._step_schedulers_cache: list[SchedulerConfig] = []
        self._train_loader: Any = None
        self._val_loaders: list[Any] = []
        self._val_limits: list[float] = []
        self._val_check_batch: int = 0
        self.num_training_batches: float = 0
        self._train_results = ResultCollection("train", training=True)
        self._val_results = ResultCollection("validate", training=False)
        self._results = self._train_results
        self._hooks: Hooks = Hooks(self, None, self.callbacks)
        self._step_fns: dict[str, Any] = {}
        self._run_training_step: Any = None
        self._before_optimizer_step_hooks: tuple[Any, Any] = ((), None)

    # -- construction helpers -------------------------------------------------------------------------------
    def _build_loggers(self, loggers: Any) -> list[Any]:
        if loggers is False:
            return []
        if loggers is None or loggers is True:
            from fabricx.loggers import CSVLogger

            return [CSVLogger(self.default_root_dir)]
        return list(loggers) if isinstance(loggers, (list, tuple)) else [loggers]

    def _build_callbacks(self, callbacks: Any, progress_bar: bool, summary: bool, checkpointing: bool) -> list[Any]:
        from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint
        from fabricx.train.callbacks.model_summary import RichModelSummary
        from fabricx.train.callbacks.progress_bar import RichProgressBar

        given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        extra: list[Any] = []
        if progress_bar and not any(isinstance(cb, RichProgressBar) for cb in given):
            extra.append(RichProgressBar())
        if summary and not any(isinstance(cb, RichModelSummary) for cb in given):
            extra.append(RichModelSummary())
        if checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in given):
            extra.append(ModelCheckpoint(save_last=True, save_top_k=0))
        ordered = given + extra
        # Checkpoints last, so that they store what every other callback did in the same hook.
        checkpoints = [cb for cb in ordered if isinstance(cb, ModelCheckpoint)]
        return [cb for cb in ordered if not isinstance(cb, ModelCheckpoint)] + checkpoints

    # -- public properties -----------------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The :class:`~fabricx.Fabric` running this trainer's processes."""
        return self._fabric

    @property
    def module(self) -> TrainModule | None:
        """The module being run (the user's own object)."""
        return self._module

    @property
    def model(self) -> FabricModule | None:
        """The set-up (wrapped) module."""
        return self._model

    @property
    def optimizers(self) -> list[Any]:
        return self._optimizers

    @property
    def lr_scheduler_configs(self) -> list[SchedulerConfig]:
        return self._scheduler_configs

    @property
    def loggers(self) -> list[Any]:
        return self._loggers

    @property
    def logger(self) -> Any:
        return self._loggers[0] if self._loggers else None

    @property
    def log_dir(self) -> str:
        """The first logger's folder, or ``default_root_dir``."""
        log_dir = getattr(self.logger, "log_dir", None)
        return log_dir if log_dir is not None else self.default_root_dir

    @property
    def is_global_zero(self) -> bool:
        return self._fabric.is_global_zero

    @property
    def global_rank(self) -> int:
        return self._fabric.global_rank

    @property
    def world_size(self) -> int:
        return self._fabric.world_size

    @property
    def training(self) -> bool:
        return self.state == "fit" and not self.sanity_checking

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """Metrics callbacks can monitor: epoch values of every stage plus the current step's values."""
        metrics = dict(self._epoch_metrics)
        metrics.update(self._train_results.step_metrics(naming="both"))
        return metrics

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """Metrics logged with ``prog_bar=True`` (latest values)."""
        metrics = dict(self._epoch_prog_bar)
        metrics.update(self._train_results.step_metrics(prog_bar_only=True, naming="base"))
        return metrics

    @property
    def num_val_batches(self) -> list[float]:
        return list(self._val_limits)

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint

        return [cb for cb in self.callbacks if isinstance(cb, ModelCheckpoint)]

    @property
    def checkpoint_callback(self) -> Any:
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callback(self) -> Any:
        from fabricx.train.callbacks.early_stopping import EarlyStopping

        return next((cb for cb in self.callbacks if isinstance(cb, EarlyStopping)), None)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only."""
        self._fabric.print(*args, **kwargs)

    # -- entry points ----------------------------------------------------------------------------------------
    def fit(
        self,
        module: TrainModule,
        train_dataloaders: Any,
        val_dataloaders: Any = None,
        ckpt_path: str | os.PathLike | None = None,
    ) -> None:
        """Train ``module``; ``ckpt_path`` (a checkpoint, or ``"last"``) resumes exactly where it stopped.

        A resumed run continues with the batch after the checkpoint, with the optimizer, scheduler,
        grad-scaler, random-generator, callback and metric states of that moment. Hooks that already ran
        for the interrupted epoch (``on_train_epoch_start``) are not called again.

        Example::

            trainer.fit(model, train_loader, val_loader, ckpt_path="last")
        """
        _check_module(module, "fit")
        self._launch(self._fit_in_process, module, train_dataloaders, val_dataloaders, ckpt_path)

    def validate(
        self, module: TrainModule, dataloaders: Any, ckpt_path: str | os.PathLike | None = None
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over ``dataloaders``; returns the epoch metrics (one dict per loader).

        Example::

            [metrics] = trainer.validate(model, val_loader)
        """
        _check_module(module, "validate")
        return self._launch(self._evaluate_in_process, module, dataloaders, ckpt_path, "validate")

    def test(
        self, module: TrainModule, dataloaders: Any, ckpt_path: str | os.PathLike | None = None
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over ``dataloaders``; returns the epoch metrics (one dict per loader).

        Example::

            [metrics] = trainer.test(model, test_loader, ckpt_path=trainer.checkpoint_callback.best_model_path)
        """
        _check_module(module, "test")
        return self._launch(self._evaluate_in_process, module, dataloaders, ckpt_path, "test")

    def predict(self, module: TrainModule, dataloaders: Any, ckpt_path: str | os.PathLike | None = None) -> Any:
        """Collect ``predict_step`` outputs (this process's share of the data; rank 0's with spawn).

        Example::

            predictions = trainer.predict(model, loader)
        """
        _check_module(module, "predict")
        return self._launch(self._predict_in_process, module, dataloaders, ckpt_path)

    def save_checkpoint(self, path: str | os.PathLike, async_save: bool = False) -> Any:
        """Write a full training checkpoint (every process must call it; outside accumulation windows).

        ``async_save=True`` writes it in the background and returns its handle (see ``Fabric.save``).

        Example::

            trainer.save_checkpoint("checkpoints/manual")
        """
        if self._model is None:
            raise FabricxError("save_checkpoint() needs a module set up by fit/validate/test first.")
        extras = ckpt.Extras()
        hook = self._hooks.module_hook("on_save_checkpoint")
        if hook is not None:
            hook(extras.values)
        for method in self._hooks.callback_hooks("on_save_checkpoint"):
            method(self, self._module, extras.values)
        return self._fabric.save(path, self._checkpoint_state(extras), async_save=async_save)

    # -- running in each process ------------------------------------------------------------------------------
    def _launch(self, function: Any, *args: Any) -> Any:
        returned = self._fabric.launch(function, *args)
        if self._spawns and isinstance(returned, dict) and "__fabricx_spawn__" in returned:
            return self._apply_spawn_result(args[0], returned)
        return returned

    def _prepare_process(self, module: TrainModule, stage: str) -> None:
        if self._spawns and self.seed is not None:
            seed_everything(self.seed)
        self.state = stage
        self.should_stop = False
        module.__dict__["_trainer"] = self
        self._module = module
        self._hooks = Hooks(self, module, self.callbacks)
        self._train_results.module = module

    def _fit_in_process(
        self, fabric: Fabric, module: TrainModule, train_dataloaders: Any, val_dataloaders: Any, ckpt_path: Any
    ) -> Any:
        self._prepare_process(module, "fit")
        hooks = self._hooks
        try:
            hooks.call("setup", "fit")
            self._setup_fit(module, train_dataloaders, val_dataloaders)
            hooks.call("on_fit_start")
            if self._val_loaders and self.num_sanity_val_steps != 0:
                self._run_sanity_check()
            path = ckpt.resolve_ckpt_path(self, ckpt_path) if fabric.is_global_zero else None
            if fabric.world_size > 1:
                path = fabric.broadcast(path)
            if path is not None:
                self._restore(path)
            self._log_hyperparams()
            hooks.call("on_train_start")
            run_fit_loop(self)
            hooks.call("on_train_end")
            hooks.call("on_fit_end")
            self._finalize_loggers("success")
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            hooks.call("teardown", "fit")
            self.state = "finished"
        if self._spawns:
            return self._spawn_result(None)
        return None

    def _evaluate_in_process(
        self, fabric: Fabric, module: TrainModule, dataloaders: Any, ckpt_path: Any, stage: str
    ) -> Any:
        self._prepare_process(module, stage)
        hooks = self._hooks
        try:
            hooks.call("setup", stage)
            self._setup_module_only(module)
            if ckpt_path is not None:
                fabric.load(ckpt.resolve_ckpt_path(self, ckpt_path), {"module": self._model})
            loaders = self._setup_loaders(dataloaders, f"Trainer.{stage}")
            limit = self.limit_val_batches if stage == "validate" else self.limit_test_batches
            limits = [_limited_length(loader, limit) for loader in loaders]
            results = ResultCollection(stage, training=False, module=module)
            if stage == "validate":
                self._val_limits = limits
            metrics = run_evaluation(self, stage, results, loaders, limits)
            self._finalize_loggers("success")
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            hooks.call("teardown", stage)
            self.state = "finished"
        return self._spawn_result(metrics) if self._spawns else metrics

    def _predict_in_process(self, fabric: Fabric, module: TrainModule, dataloaders: Any, ckpt_path: Any) -> Any:
        self._prepare_process(module, "predict")
        hooks = self._hooks
        try:
            hooks.call("setup", "predict")
            self._setup_module_only(module)
            if ckpt_path is not None:
                fabric.load(ckpt.resolve_ckpt_path(self, ckpt_path), {"module": self._model})
            loaders = self._setup_loaders(dataloaders, "Trainer.predict")
            limits = [_limited_length(loader, self.limit_predict_batches) for loader in loaders]
            predictions = run_prediction(self, loaders, limits)
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            hooks.call("teardown", "predict")
            self.state = "finished"
        return self._spawn_result(predictions) if self._spawns else predictions

    # -- set-up ----------------------------------------------------------------------------------------------
    def _setup_fit(self, module: TrainModule, train_dataloaders: Any, val_dataloaders: Any) -> None:
        fabric = self._fabric
        optimizers, self._scheduler_configs = parse_optimizers(module.configure_optimizers())
        wrapped = self._wrapped.get(id(module))
        if wrapped is None:
            set_up = fabric.setup(module, *optimizers)
            self._model = set_up[0]
            self._optimizers = list(set_up[1:])
            self._wrapped[id(module)] = self._model
        else:
            self._model = wrapped
            set_up = fabric.setup_optimizers(*optimizers)
            self._optimizers = list(set_up) if isinstance(set_up, tuple) else [set_up]
        self._step_schedulers_cache = [c for c in self._scheduler_configs if c.interval == "step"]
        self._make_step_functions()

        if train_dataloaders is None:
            raise MisconfigurationError("Trainer.fit needs train_dataloaders (a torch DataLoader).")
        [self._train_loader] = self._setup_loaders(train_dataloaders, "Trainer.fit(train_dataloaders)", single=True)
        self.num_training_batches = _limited_length(self._train_loader, self.limit_train_batches)
        self._val_loaders = (
            self._setup_loaders(val_dataloaders, "Trainer.fit(val_dataloaders)") if val_dataloaders is not None else []
        )
        self._val_limits = [_limited_length(loader, self.limit_val_batches) for loader in self._val_loaders]
        if not any(limit > 0 for limit in self._val_limits):
            self._val_check_batch = 0
        elif self.val_check_interval is None or self.val_check_interval == 1.0:
            self._val_check_batch = self.num_training_batches if not math.isinf(self.num_training_batches) else 0
        elif isinstance(self.val_check_interval, float):
            if math.isinf(self.num_training_batches):
                raise MisconfigurationError(
                    f"val_check_interval={self.val_check_interval} is a fraction of an epoch, but the training "
                    "loader has no length. Give an int (every N batches) instead."
                )
            self._val_check_batch = max(1, int(self.num_training_batches * self.val_check_interval))
        else:
            self._val_check_batch = int(self.val_check_interval)
        self._val_results = ResultCollection("validate", training=False, module=module)
        self._train_results = ResultCollection("train", training=True, module=module)
        self._results = self._train_results
        self.global_step = 0
        self.current_epoch = 0
        self._epoch_done = False
        self._resume_mid_epoch = False
        self._epoch_metrics = {}
        self._epoch_prog_bar = {}
        if not module.training:
            # A module handed over in eval mode (e.g. after testing) trains in train mode; submodules
            # the user put in eval mode inside a training module stay as they are.
            module.train()

    def _setup_module_only(self, module: TrainModule) -> None:
        wrapped = self._wrapped.get(id(module))
        if wrapped is None:
            wrapped = self._fabric.setup_module(module)
            self._wrapped[id(module)] = wrapped
        self._model = wrapped
        self._step_fns = {}

    def _setup_loaders(self, dataloaders: Any, where: str, single: bool = False) -> list[Any]:
        given = list(dataloaders) if isinstance(dataloaders, (list, tuple)) else [dataloaders]
        if single and len(given) != 1:
            raise MisconfigurationError(f"{where} takes one DataLoader, got {len(given)}.")
        if not given:
            raise MisconfigurationError(f"{where} got an empty list of DataLoaders.")
        set_up = self._fabric.setup_dataloaders(*given)
        return list(set_up) if isinstance(set_up, tuple) else [set_up]

    def _make_step_functions(self) -> None:
        self._step_fns = {}
        training_step = self._step_function("training_step")
        backward = self._fabric.backward
        hooks = self._hooks
        before_backward = hooks.callback_hooks("on_before_backward")
        before_backward_module = hooks.module_hook("on_before_backward")
        after_backward = hooks.callback_hooks("on_after_backward")
        after_backward_module = hooks.module_hook("on_after_backward")
        trainer, module = self, self._module
        self._before_optimizer_step_hooks = (
            hooks.callback_hooks("on_before_optimizer_step"),
            hooks.module_hook("on_before_optimizer_step"),
        )

        def run_training_step(batch: Any, batch_idx: int) -> Any:
            outputs = training_step(batch, batch_idx)
            loss = extract_loss(outputs)
            trainer._last_loss = loss
            for method in before_backward:
                method(trainer, module, loss)
            if before_backward_module is not None:
                before_backward_module(loss)
            backward(loss)
            for method in after_backward:
                method(trainer, module)
            if after_backward_module is not None:
                after_backward_module()
            return outputs

        self._run_training_step = run_training_step

    def _step_function(self, name: str) -> Any:
        function = self._step_fns.get(name)
        if function is None:
            function = self._step_fns[name] = step_caller(self._model, self._module, name)
        return function

    # -- the optimizer step ----------------------------------------------------------------------------------
    def _optimizer_step(self) -> None:
        before, before_module = self._before_optimizer_step_hooks
        clip = self.gradient_clip_val
        for optimizer in self._optimizers:
            for method in before:
                method(self, self._module, optimizer)
            if before_module is not None:
                before_module(optimizer)
            if clip is not None:
                if self.gradient_clip_algorithm == "norm":
                    self._fabric.clip_gradients(self._model, optimizer, max_norm=clip, error_if_nonfinite=False)
                else:
                    self._fabric.clip_gradients(self._model, optimizer, clip_val=clip)
            optimizer.step()
            optimizer.zero_grad()
        self.global_step += 1
        if self._step_schedulers_cache:
            self._step_schedulers("step")

    def _step_schedulers(self, interval: str) -> None:
        counter = self.global_step if interval == "step" else self.current_epoch + 1
        for config in self._scheduler_configs:
            if config.interval != interval or counter % config.frequency != 0:
                continue
            if config.reduce_on_plateau:
                metrics = self.callback_metrics
                if config.monitor not in metrics:
                    if not config.strict:
                        continue
                    raise MisconfigurationError(
                        f"The lr_scheduler from configure_optimizers monitors {config.monitor!r}, which was not "
                        f"logged before the {interval}-interval scheduler step. Logged metrics: "
                        f"{sorted(metrics)}. Log it with self.log({config.monitor!r}, ...) or change monitor."
                    )
                config.scheduler.step(float(metrics[config.monitor]))
            else:
                config.scheduler.step()

    # -- validation inside fit ---------------------------------------------------------------------------------
    def _fit_is_done(self) -> bool:
        if self.max_steps >= 0 and self.global_step >= self.max_steps:
            return True
        return self.max_epochs is not None and self.max_epochs >= 0 and self.current_epoch >= self.max_epochs

    def _should_validate_this_epoch(self) -> bool:
        every = self.check_val_every_n_epoch
        return every is None or (self.current_epoch + 1) % every == 0

    def _run_validation_in_fit(self) -> None:
        run_evaluation(self, "validate", self._val_results, self._val_loaders, self._val_limits)

    def _run_sanity_check(self) -> None:
        steps = self.num_sanity_val_steps
        limits = [limit if steps < 0 else min(limit, steps) for limit in self._val_limits]
        # The check must not change what training does afterwards: random generators are put back.
        rng = capture_rng_states()
        self.sanity_checking = True
        try:
            self._hooks.call("on_sanity_check_start")
            run_evaluation(self, "validate", self._val_results, self._val_loaders, limits, sanity=True)
            self._hooks.call("on_sanity_check_end")
        finally:
            self.sanity_checking = False
            restore_rng_states(rng)

    # -- metrics -------------------------------------------------------------------------------------------------
    def _finish_epoch_metrics(self, results: ResultCollection) -> dict[str, Any]:
        computed = results.compute_epoch(self._fabric)
        to_log: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for name, (value, entry) in computed.items():
            out[name] = value
            self._epoch_metrics[name] = value
            if name != entry.name:
                self._epoch_metrics[entry.name] = value
            if entry.prog_bar:
                self._epoch_prog_bar[entry.name] = value
            if entry.logger:
                to_log[name] = value
        if to_log and self._loggers and self._fabric.is_global_zero:
            to_log["epoch"] = self.current_epoch
            self._fabric.log_dict(to_log, step=self.global_step)
        return out

    def _log_step_metrics(self) -> None:
        results = self._train_results
        metrics = results.step_metrics(for_logger=True, sync=self._fabric if self.world_size > 1 else None)
        if metrics and self._fabric.is_global_zero:
            metrics["epoch"] = self.current_epoch
            self._fabric.log_dict(metrics, step=self.global_step)

    def _log_hyperparams(self) -> None:
        hparams = self._module.hparams if isinstance(self._module, TrainModule) else {}
        if hparams and self._fabric.is_global_zero:
            for logger in self._loggers:
                logger.log_hyperparams(hparams)

    def _finalize_loggers(self, status: str) -> None:
        if self._fabric.is_global_zero:
            for logger in self._loggers:
                logger.finalize(status)

    def _on_exception(self, exception: BaseException) -> None:
        for method in self._hooks.callback_hooks("on_exception"):
            method(self, self._module, exception)
        try:
            self._finalize_loggers("failed")
        except Exception:  # the original exception matters more than a logger failing to close
            pass

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def _checkpoint_state(self, extras: ckpt.Extras) -> dict[str, Any]:
        return {
            "module": self._model,
            "optimizers": {str(i): optimizer for i, optimizer in enumerate(self._optimizers)},
            "schedulers": {str(i): config.scheduler for i, config in enumerate(self._scheduler_configs)},
            "train_loader": self._train_loader,
            "trainer": ckpt.ProgressState(self),
            "callbacks": ckpt.CallbackStates(self.callbacks),
            "metrics": ckpt.MetricStates(self),
            "extra": extras,
        }

    def _restore(self, path: str) -> None:
        extras = ckpt.Extras()
        self._fabric.load(path, self._checkpoint_state(extras))
        for optimizer in self._optimizers:
            # Optimizer.load_state_dict rebinds param_groups/state on the user's optimizer; the wrapper
            # copied the old references at setup and must see the loaded ones.
            inner = unwrap(optimizer)
            for name in ("param_groups", "state", "defaults"):
                if name in optimizer.__dict__:
                    optimizer.__dict__[name] = inner.__dict__[name]
        hook = self._hooks.module_hook("on_load_checkpoint")
        if hook is not None:
            hook(extras.values)
        for method in self._hooks.callback_hooks("on_load_checkpoint"):
            method(self, self._module, extras.values)
        loader = self._train_loader
        if self._epoch_done:
            # Saved at the end of an epoch: continue with the next one.
            self.current_epoch += 1
            self._epoch_done = False
            state = loader.state_dict()
            if state["started"] and not state["finished"]:
                # The epoch was cut short (limit_train_batches, max_steps): drop the rest of it.
                iter(loader.loader)
            self._resume_mid_epoch = False
        else:
            self._resume_mid_epoch = loader.state_dict()["started"]

    # -- spawned processes -----------------------------------------------------------------------------------------
    def _spawn_result(self, result: Any) -> dict[str, Any]:
        module = self._module
        return {
            "__fabricx_spawn__": True,
            "result": result,
            "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()} if module is not None else None,
            "global_step": self.global_step,
            "current_epoch": self.current_epoch,
            "callback_metrics": {k: _cpu(v) for k, v in self._epoch_metrics.items()},
            "callbacks": ckpt.CallbackStates(self.callbacks).state_dict(),
        }

    def _apply_spawn_result(self, module: TrainModule, returned: dict[str, Any]) -> Any:
        if returned["state_dict"] is not None:
            module.load_state_dict(returned["state_dict"])
        self.global_step = returned["global_step"]
        self.current_epoch = returned["current_epoch"]
        self._epoch_metrics = returned["callback_metrics"]
        ckpt.CallbackStates(self.callbacks).load_state_dict(returned["callbacks"])
        module.__dict__["_trainer"] = self
        self._module = module
        return returned["result"]


class _TrainerFabric(Fabric):
    """A Fabric that can be pickled into spawned processes (weak sets are sent as their items)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key, value in state.items():
            if isinstance(value, weakref.WeakSet):
                state[key] = _WeakSetItems(list(value))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if isinstance(value, _WeakSetItems):
                state[key] = weakref.WeakSet(value.items)
        self.__dict__.update(state)


class _WeakSetItems:
    def __init__(self, items: list[Any]) -> None:
        self.items = items


def _cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, Tensor) else value


def _check_module(module: Any, where: str) -> None:
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"Trainer.{where} expects a TrainModule, got {type(module).__name__}.")
    if isinstance(module, TrainModule) and "_trainer" not in module.__dict__:
        raise FabricxError(
            f"{type(module).__name__}.__init__ did not call super().__init__(); add it as the first line."
        )


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MisconfigurationError(f"{name}={value!r}; it must be an int >= {minimum}.")


def _check_limit(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MisconfigurationError(f"{name}={value!r}; give an int (batches), a float in [0, 1] or None.")
    if isinstance(value, float) and not 0.0 <= value <= 1.0:
        raise MisconfigurationError(f"{name}={value}; a float must be a fraction in [0, 1].")
    if isinstance(value, int) and value < 0:
        raise MisconfigurationError(f"{name}={value}; an int must be >= 0.")


def _limited_length(loader: Any, limit: int | float | None) -> float:
    try:
        length: float = len(loader)
    except TypeError:
        length = math.inf
    if limit is None:
        return length
    if isinstance(limit, float):
        if math.isinf(length):
            if limit in (0.0, 1.0):
                return 0 if limit == 0.0 else length
            raise MisconfigurationError(
                f"A fractional batch limit ({limit}) needs a loader with a length; give an int limit instead."
            )
        return int(length * limit) if limit < 1.0 else length
    return min(length, limit)


__all__ = ["Trainer"]
