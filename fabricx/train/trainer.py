"""``Trainer``: drives a `fabricx.train.TrainModule` through a `fabricx.Fabric`."""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import sys
import time
import weakref
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor

from fabricx.fabric import Fabric
from fabricx.train import checkpointing as ckpt
from fabricx.train import data_connector as data
from fabricx.train import flags
from fabricx.train import loaders as setup
from fabricx.train.batch_transfer import batch_processor
from fabricx.train.ckpt_path import select_ckpt_path
from fabricx.train.config import TrainerConfig
from fabricx.train.env_defaults import defaults_from_env_vars
from fabricx.train.eval_loop import run_evaluation, run_prediction, takes_batch_idx
from fabricx.train.fit_loop import run_fit_loop, training_output
from fabricx.train.hooks import Hooks
from fabricx.train.lightning_checkpoint import HParamsState, restore_lightning_keys
from fabricx.train.logger_connector import LoggerConnector
from fabricx.train.logging_result import ResultCollection
from fabricx.train.loop_checks import check_loop_configuration, defines_step, warn_val_mismatch
from fabricx.train.loop_objects import EvaluationLoop, FitLoop
from fabricx.train.module import TrainModule
from fabricx.train.optimizer_proxy import TrainerOptimizer
from fabricx.train.optimizers import SchedulerConfig, parse_optimizers
from fabricx.train.progress import Progress
from fabricx.train.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.utilities.profilers import PassThroughProfiler, Profiler, profiled
from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_log_info, rank_zero_warn
from fabricx.utilities.rng import capture_rng_states, restore_rng_states
from fabricx.utilities.seed import seed_everything
from fabricx.utilities.warnings import PossibleUserWarning
from fabricx.wrappers import unwrap
from fabricx.wrappers.step_methods import step_caller

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import timedelta

    from fabricx.accelerators.accelerator import Accelerator
    from fabricx.capabilities import LoggerLike
    from fabricx.connector import Plugin
    from fabricx.flags import AcceleratorName, StrategyName
    from fabricx.strategies.strategy import Strategy
    from fabricx.train.callbacks.base import Callback
    from fabricx.wrappers import FabricModule

log = logging.getLogger(__name__)


class Trainer:
    """Fit, validate, test and predict with a `TrainModule` on any hardware, strategy and precision.

    The Fabric flags (``accelerator``, ``strategy``, ``devices``, ``num_nodes``, ``precision``,
    ``plugins``) mean what they mean for `fabricx.Fabric`; the Trainer builds one and runs
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
        limit_train_batches: Use at most N training batches (int) or a fraction (float) of the loader per
            epoch (``None``: all).
        limit_val_batches: The same for each validation loader.
        limit_test_batches: The same for each test loader.
        limit_predict_batches: The same for each predict loader.
        num_sanity_val_steps: Validation batches run before training to find bugs early (``-1``: all);
            they change no state, random generators included.
        log_every_n_steps: Send step metrics to the loggers every N optimizer steps.
        callbacks: A callback or a list; a progress bar, a model summary and a ModelCheckpoint are added
            unless disabled or given.
        loggers: A logger or a list; ``None`` gives a CSVLogger under ``default_root_dir``; ``False`` none.
        default_root_dir: Where logs and checkpoints go by default (the working directory).
        enable_progress_bar: Add the default RichProgressBar (``None``: yes).
        enable_model_summary: Add the default RichModelSummary (``None``: yes).
        enable_checkpointing: Add the default ``ModelCheckpoint(save_last=True, save_top_k=0)`` (a
            ``last`` checkpoint in ``default_root_dir/checkpoints`` at each epoch end).
        seed: ``seed_everything(seed)`` now (build the module afterwards for a seeded initialisation)
            and in every process the Trainer starts.
        profiler: ``"simple"``, ``"advanced"``, ``"pytorch"`` or a profiler from
            `fabricx.utilities.profilers`: times the steps, backward and every hook; the report is
            printed (or written to its ``dirpath``, per rank) when fit/validate/test/predict ends.
        compile: ``torch.compile`` the module as ``Fabric(compile=...)`` does (``True``, arguments, ``"regional"``).

    Example:
        ```python
        trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=5, seed=0)
        trainer.fit(MyModule(), train_loader, val_loader)
        trainer.fit(MyModule(), train_loader, val_loader, ckpt_path="last")  # resumes exactly
        ```
    """

    # The checked flags, set from `TrainerConfig` in __init__ (plain attributes, assignable as in Lightning).
    fast_dev_run: int
    overfit_batches: int | float
    max_time: float | None
    reload_dataloaders_every_n_epochs: int
    deterministic: bool | str | None
    inference_mode: bool
    use_distributed_sampler: bool
    detect_anomaly: bool
    sync_batchnorm: bool
    enable_autolog_hparams: bool
    barebones: bool
    min_epochs: int | None
    min_steps: int | None
    default_root_dir: str
    seed: int | None
    max_epochs: int | None
    max_steps: int
    gradient_clip_val: float | None
    gradient_clip_algorithm: str | None
    val_check_interval: int | float | None
    check_val_every_n_epoch: int | None
    limit_train_batches: int | float | None
    limit_val_batches: int | float | None
    limit_test_batches: int | float | None
    limit_predict_batches: int | float | None
    num_sanity_val_steps: int
    log_every_n_steps: int
    profiler: Profiler
    val_check_seconds: float | None
    should_stop: bool
    """Set it to `True` (from a callback or the module) to end `fit` once `min_epochs`/`min_steps` allow."""

    @defaults_from_env_vars
    def __init__(
        self,
        *,
        accelerator: AcceleratorName | Accelerator = "auto",
        strategy: StrategyName | Strategy = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: str | int | None = None,
        plugins: Plugin | Sequence[Plugin] | None = None,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        max_time: str | timedelta | dict[str, int] | None = None,
        grad_accum_steps: int = 1,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        callbacks: Callback | Sequence[Callback] | None = None,
        loggers: LoggerLike | Sequence[LoggerLike] | bool | None = None,
        logger: LoggerLike | Sequence[LoggerLike] | bool | None = None,
        default_root_dir: str | os.PathLike | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        enable_checkpointing: bool | None = None,
        fast_dev_run: int | bool = False,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        profiler: Profiler | str | None = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
        seed: int | None = None,
        compile: bool | str | dict[str, Any] | None = None,
    ) -> None:
        # Every flag is checked (and Lightning's modes applied) by the config; the Trainer keeps the results.
        config = self.config = TrainerConfig(**{name: value for name, value in locals().items() if name != "self"})
        vars(self).update(config.trainer_attributes())
        config.apply_process_settings()
        self._loggers = self._build_loggers(config.loggers)
        self._fabric = _TrainerFabric(**config.fabric_flags(), loggers=self._loggers)
        # Processes started by the Trainer itself (spawn/fork) send their results back to this one.
        self._spawns = bool(getattr(self._fabric.strategy.launcher, "requires_function", False))
        self.callbacks = self._build_callbacks(config)
        self._init_run_state()

    def _init_run_state(self) -> None:
        """The state of a run (progress, metrics, the set-up objects), empty until an entry point fills it."""
        self._profiling = not isinstance(self.profiler, PassThroughProfiler)  # checked in every step: a bool
        self._given_callbacks = list(self.callbacks)  # configure_callbacks() replaces kinds among these per run
        self._ckpt_path: str | None = None
        self._eval_loaders: dict[str, list[Any]] = {}
        self._eval_limits: dict[str, list[float]] = {}
        # progress (owned by the loops; trainer.progress is public)
        self.progress = Progress()
        # Lightning's loop objects: their progress counters (checkpointed under `loops`), and the
        # validation fit runs (fit_loop.epoch_loop.val_loop.run()).
        self.fit_loop = FitLoop(self, self._run_validation_in_fit)
        self.validate_loop = EvaluationLoop()
        self.test_loop = EvaluationLoop()
        self.predict_loop = EvaluationLoop()
        self.should_stop = False
        self.state = TrainerState()
        self._logger_connector = LoggerConnector(self)
        self._cut_metric_state: dict[str, Any] | None = None
        self._last_loss: Tensor | None = None
        self._fit_started_at: float | None = None

        # set up per run
        self._module: TrainModule | None = None
        self._datamodule: Any = None
        self._model: FabricModule | None = None
        self._wrapped: dict[int, FabricModule] = {}
        self._optimizers: list[Any] = []
        self._module_optimizers: list[TrainerOptimizer] = []
        self._scheduler_configs: list[SchedulerConfig] = []
        self._step_schedulers_cache: list[SchedulerConfig] = []
        self._epoch_schedulers_cache: list[SchedulerConfig] = []
        self._automatic = True
        self._train_loader: Any = None
        self._train_source: Any = None
        self._val_loaders: list[Any] = []
        self._val_source: Any = None
        self._val_limits: list[float] = []
        self._val_limits_of_fit = False
        self._val_check_batch: float = 0
        self._val_enabled = False
        self._stop_postponed_said = False  # the min_epochs/min_steps note is given once, as in Lightning
        self._last_val_time = 0.0  # when the last validation ended (time-based val_check_interval)
        self._train_reload_epoch: float = -math.inf
        self._val_reload_epoch: float = -math.inf
        self._val_warned = True
        self._val_built = False
        self._batch_processor: Any = None
        self.num_training_batches: float = 0
        self._train_results = ResultCollection("train", training=True)
        self._val_results = ResultCollection("validate", training=False)
        self._results = self._train_results
        self._hooks: Hooks = Hooks(self, None, self.callbacks)
        self._step_fns: dict[str, Any] = {}
        self._automatic_step: Any = None
        self._manual_step: Any = None
        self._before_optimizer_step_hooks: tuple[Any, Any, Any] = ((), None, None)

    # -- construction helpers -------------------------------------------------------------------------------
    def _build_loggers(self, loggers: Any) -> list[Any]:
        if loggers is False:
            return []
        if loggers is None or loggers is True:
            from fabricx.loggers import CSVLogger

            return [CSVLogger(self.default_root_dir)]
        return list(loggers) if isinstance(loggers, (list, tuple)) else [loggers]

    def _build_callbacks(self, config: TrainerConfig) -> list[Any]:
        from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint
        from fabricx.train.callbacks.model_summary import RichModelSummary
        from fabricx.train.callbacks.progress_bar import RichProgressBar
        from fabricx.train.callbacks.tqdm_progress import TQDMProgressBar

        callbacks = config.callbacks
        given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        extra: list[Any] = []
        if config.enable_progress_bar and not any(isinstance(cb, (RichProgressBar, TQDMProgressBar)) for cb in given):
            extra.append(RichProgressBar())
        if config.enable_model_summary and not any(isinstance(cb, RichModelSummary) for cb in given):
            extra.append(RichModelSummary())
        if config.enable_checkpointing and not any(isinstance(cb, ModelCheckpoint) for cb in given):
            default = ModelCheckpoint(save_last=True, save_top_k=0)
            default._last_at_every_trigger = True  # a last.ckpt at every epoch end, for fit(ckpt_path="last")
            extra.append(default)
        ordered = given + extra
        # Checkpoints last, so that they store what every other callback did in the same hook.
        checkpoints = [cb for cb in ordered if isinstance(cb, ModelCheckpoint)]
        return [cb for cb in ordered if not isinstance(cb, ModelCheckpoint)] + checkpoints

    # -- public properties -----------------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The `fabricx.Fabric` running this trainer's processes."""
        return self._fabric

    @property
    def module(self) -> TrainModule | None:
        """The module being run (the user's own object)."""
        return self._module

    @property
    def lightning_module(self) -> TrainModule | None:
        """The module being run (Lightning's name for `module`)."""
        return self._module

    @property
    def model(self) -> FabricModule | None:
        """The set-up (wrapped) module."""
        return self._model

    @property
    def datamodule(self) -> Any:
        """The DataModule of the current (or last) run, or ``None``."""
        return self._datamodule

    @property
    def global_step(self) -> int:
        """Optimizer steps taken."""
        return self.progress.global_step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.progress.global_step = value

    @property
    def current_epoch(self) -> int:
        """The epoch being trained, from 0."""
        return self.progress.current_epoch

    @current_epoch.setter
    def current_epoch(self, value: int) -> None:
        self.progress.current_epoch = value

    @property
    def is_last_batch(self) -> bool:
        return self.progress.is_last_batch

    @property
    def last_loss(self) -> Tensor | None:
        """The loss of the latest training batch (automatic optimization)."""
        return self._last_loss

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
    def local_rank(self) -> int:
        return self._fabric.local_rank

    @property
    def node_rank(self) -> int:
        return self._fabric.node_rank

    @property
    def world_size(self) -> int:
        return self._fabric.world_size

    @property
    def num_devices(self) -> int:
        """Processes per node."""
        return max(1, self._fabric.world_size // max(1, self.config.num_nodes))

    @property
    def num_nodes(self) -> int:
        return self.config.num_nodes

    @property
    def strategy(self) -> Any:
        return self._fabric.strategy

    @property
    def accelerator(self) -> Any:
        return self._fabric.accelerator

    @property
    def precision(self) -> str:
        """The precision setting, e.g. ``"32-true"``."""
        plugin = self._fabric.strategy.precision
        return str(getattr(plugin, "precision", self.config.precision or "32-true"))

    @property
    def device_ids(self) -> list[int]:
        device = self._fabric.device
        return [device.index if device.index is not None else self.local_rank]

    @property
    def accumulate_grad_batches(self) -> int:
        return self._fabric.grad_accum_steps

    def _stage_setter(self, stage: RunningStage, value: bool) -> None:
        if value:
            self.state.stage = stage
        elif self.state.stage == stage:
            self.state.stage = None

    @property
    def training(self) -> bool:
        """Whether the training loop runs now (``trainer.state.stage == "train"``)."""
        return self.state.stage == RunningStage.TRAINING

    @training.setter
    def training(self, value: bool) -> None:
        self._stage_setter(RunningStage.TRAINING, value)

    @property
    def sanity_checking(self) -> bool:
        """Whether the validation batches before training (``num_sanity_val_steps``) run now."""
        return self.state.stage == RunningStage.SANITY_CHECKING

    @sanity_checking.setter
    def sanity_checking(self, value: bool) -> None:
        self._stage_setter(RunningStage.SANITY_CHECKING, value)

    @property
    def validating(self) -> bool:
        return self.state.stage == RunningStage.VALIDATING

    @validating.setter
    def validating(self, value: bool) -> None:
        self._stage_setter(RunningStage.VALIDATING, value)

    @property
    def testing(self) -> bool:
        return self.state.stage == RunningStage.TESTING

    @testing.setter
    def testing(self, value: bool) -> None:
        self._stage_setter(RunningStage.TESTING, value)

    @property
    def predicting(self) -> bool:
        return self.state.stage == RunningStage.PREDICTING

    @predicting.setter
    def predicting(self, value: bool) -> None:
        self._stage_setter(RunningStage.PREDICTING, value)

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """Metrics callbacks can monitor: the latest value of every name, as in Lightning.

        A metric logged with ``on_step=True, on_epoch=True`` appears as ``name_step``, ``name_epoch``
        and ``name``: the step value during the epoch, the epoch value once the epoch ended. Validation and
        test step values are not here (only in `logged_metrics`)."""
        return self._logger_connector.callback_metrics()

    @property
    def logged_metrics(self) -> dict[str, Any]:
        """The latest value of every metric meant for the loggers (without ``epoch``), as in Lightning."""
        return self._logger_connector.logged_metrics()

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """Metrics logged with ``prog_bar=True`` (latest values, as numbers; ``name_step``/``name_epoch``)."""
        return self._logger_connector.progress_bar_metrics()

    @property
    def stage_metric_names(self) -> set[str]:
        """Names logged so far in the stage that runs now (training, validation, test)."""
        results = self._results
        return results.names() if results is not None else set()

    @property
    def _results(self) -> ResultCollection | None:
        """The collection ``self.log`` writes to: the running loop's."""
        return self._logger_connector.results

    @_results.setter
    def _results(self, results: ResultCollection | None) -> None:
        self._logger_connector.results = results

    @property
    def num_val_batches(self) -> list[float]:
        return _per_iterable(self._val_loaders, self._val_limits, self.limit_val_batches, "limit_val_batches")

    @property
    def train_dataloader(self) -> Any:
        """The training loader(s) of the current fit as they were given (a dict/list for several), as Lightning's."""
        return None if self._train_loader is None else setup.user_loader(self._train_loader)

    @property
    def val_dataloaders(self) -> Any:
        """The set-up validation loader (a list when there are several)."""
        return _user_view(self._val_loaders)

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the whole fit will take (``max_steps`` when set; ``inf`` for unsized data)."""
        if self.max_steps >= 0 and (self.max_epochs is None or self.max_epochs < 0):
            return self.max_steps
        if self._train_loader is None and self.state.fn == TrainerFn.FITTING and self._train_source is not None:
            # Asked before the loop starts (configure_optimizers, e.g. for OneCycleLR): load the data now.
            self._ensure_train_loader()
        batches = self.num_training_batches
        if self._train_loader is None:
            raise FabricxError("estimated_stepping_batches is known once fit has set up the training data.")
        if math.isinf(batches):
            return self.max_steps if self.max_steps >= 0 else math.inf
        per_epoch = math.ceil(batches / self.accumulate_grad_batches)
        epochs = self.max_epochs if self.max_epochs is not None and self.max_epochs >= 0 else math.inf
        total = per_epoch * epochs
        return min(total, self.max_steps) if self.max_steps >= 0 else total

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

    @property
    def progress_bar_callback(self) -> Any:
        from fabricx.train.callbacks.progress_bar import RichProgressBar
        from fabricx.train.callbacks.tqdm_progress import TQDMProgressBar

        return next((cb for cb in self.callbacks if isinstance(cb, (RichProgressBar, TQDMProgressBar))), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        from fabricx.train.callbacks.early_stopping import EarlyStopping

        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def enable_validation(self) -> bool:
        """Whether fit validates (validation data, a validation_step and a non-zero batch limit)."""
        return self._validation_enabled()

    @property
    def evaluating(self) -> bool:
        """Whether an evaluation loop runs now (sanity checking, validation or test)."""
        return self.state.stage is not None and self.state.stage.evaluating

    @property
    def interrupted(self) -> bool:
        """Whether the last entry point ended by an exception (``KeyboardInterrupt`` included)."""
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def received_sigterm(self) -> bool:
        return False

    @property
    def num_sanity_val_batches(self) -> list[float]:
        steps = self.num_sanity_val_steps
        if not self._val_limits_of_fit:
            return []  # as Lightning: fit's figure (validate() alone has no sanity check)
        return [limit if steps < 0 else min(limit, steps) for limit in self.num_val_batches]

    @property
    def num_test_batches(self) -> list[float]:
        loaders, limits = self._eval_loaders.get("test"), self._eval_limits.get("test", [])
        return _per_iterable(loaders, limits, self.limit_test_batches, "limit_test_batches")

    @property
    def num_predict_batches(self) -> list[float]:
        loaders, limits = self._eval_loaders.get("predict"), self._eval_limits.get("predict", [])
        return _per_iterable(loaders, limits, self.limit_predict_batches, "limit_predict_batches")

    @property
    def test_dataloaders(self) -> Any:
        return _user_view(self._eval_loaders.get("test"))

    @property
    def predict_dataloaders(self) -> Any:
        return _user_view(self._eval_loaders.get("predict"))

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        return self._fabric.strategy.distributed_sampler_kwargs

    @property
    def precision_plugin(self) -> Any:
        return self._fabric.strategy.precision

    @property
    def scaler(self) -> Any:
        """The grad scaler of ``"16-mixed"`` (``None`` otherwise)."""
        return getattr(self._fabric.strategy.precision, "scaler", None)

    def init_module(self, empty_init: bool | None = None) -> Any:
        """A context to build the module in (on the device, in the precision's dtype; see ``Fabric.init_module``)."""
        return self._fabric.init_module(empty_init=empty_init)

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the current run was restored from."""
        return self._ckpt_path

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only."""
        self._fabric.print(*args, **kwargs)

    # -- entry points ----------------------------------------------------------------------------------------
    def fit(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: Any = None,
        ckpt_path: str | os.PathLike | None = None,
    ) -> None:
        """Train ``model``; ``ckpt_path`` (a checkpoint, ``"last"``, ``"best"``) resumes exactly where it stopped.

        The data comes from ``train_dataloaders``/``val_dataloaders``, else ``datamodule`` (also
        accepted in second position), else the module's own ``train_dataloader()``/``val_dataloader()``.
        Several training loaders (a dict or list) are combined batch by batch (``CombinedLoader``).
        A resumed run continues with the batch after the checkpoint, with the optimizer, scheduler,
        grad-scaler, random-generator, callback and metric states of that moment.

        Example:
            ```python
            trainer.fit(model, datamodule=dm)
            trainer.fit(model, train_loader, val_loader, ckpt_path="last")
            ```
        """
        _check_module(model, "fit")
        train_dataloaders, datamodule = data.check_fit_arguments(train_dataloaders, val_dataloaders, datamodule)
        self.max_epochs = flags.fit_max_epochs(self.max_epochs, self.max_steps, self.max_time, self.callbacks)
        self._launch(self._fit_in_process, model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)

    def validate(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike | None = None,
        verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Run ``validation_step`` over the data; returns the epoch metrics (one dict per loader).

        Without ``model`` the module of the last ``fit`` is used (with ``ckpt_path="best"`` by default
        when a ModelCheckpoint has a best checkpoint).

        Example:
            ```python
            [metrics] = trainer.validate(model, val_loader)
            ```
        """
        return self._evaluate("validate", model, dataloaders, ckpt_path, datamodule)

    def test(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike | None = None,
        verbose: bool = True,
        datamodule: Any = None,
    ) -> list[dict[str, float]]:
        """Run ``test_step`` over the data; returns the epoch metrics (one dict per loader).

        Example:
            ```python
            [metrics] = trainer.test(dataloaders=test_loader, ckpt_path="best")
            ```
        """
        return self._evaluate("test", model, dataloaders, ckpt_path, datamodule)

    def predict(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        return_predictions: bool | None = None,
        ckpt_path: str | os.PathLike | None = None,
    ) -> Any:
        """Collect ``predict_step`` outputs (this process's share of the data; rank 0's with spawn).

        Example:
            ```python
            predictions = trainer.predict(model, loader)
            ```
        """
        module, dataloaders, datamodule, ckpt_path = self._eval_arguments(
            "predict", model, dataloaders, ckpt_path, datamodule
        )
        predictions = self._launch(self._predict_in_process, module, dataloaders, datamodule, ckpt_path)
        return predictions if return_predictions is not False else None

    def _evaluate(self, stage: str, model: Any, dataloaders: Any, ckpt_path: Any, datamodule: Any) -> Any:
        module, dataloaders, datamodule, ckpt_path = self._eval_arguments(
            stage, model, dataloaders, ckpt_path, datamodule
        )
        return self._launch(self._evaluate_in_process, module, dataloaders, datamodule, ckpt_path, stage)

    def _eval_arguments(self, stage: str, model: Any, dataloaders: Any, ckpt_path: Any, datamodule: Any) -> tuple:
        if (
            model is not None
            and not isinstance(model, torch.nn.Module)
            and (data.is_datamodule(model) or hasattr(model, "__iter__"))
        ):
            # test(dataloaders) / test(dm) given positionally without a model
            model, dataloaders = None, model if dataloaders is None else dataloaders
        dataloaders, datamodule = data.check_eval_arguments(stage, dataloaders, datamodule)
        given = model is not None
        if model is None:
            model = self._module
            if model is None:
                raise TypeError(
                    f"`Trainer.{stage}()` requires a `LightningModule` when it hasn't been passed in a previous run: "
                    f"this trainer got no model and has not fitted one. Pass trainer.{stage}(model, ...)."
                )
        _check_module(model, stage)
        ckpt_path = select_ckpt_path(self, ckpt_path, stage, model_provided=given)
        if datamodule is None and dataloaders is None and self._datamodule is not None and model is self._module:
            datamodule = self._datamodule
        return model, dataloaders, datamodule, ckpt_path

    def save_checkpoint(
        self,
        filepath: str | os.PathLike,
        weights_only: bool = False,
        storage_options: Any = None,
        async_save: bool = False,
    ) -> Any:
        """Write a full training checkpoint as Lightning does (every process must call it).

        The file holds Lightning's top-level keys (``state_dict``, ``optimizer_states``, ``lr_schedulers``,
        ``epoch``, ``global_step``, ``loops``, ``callbacks``, ``hyper_parameters``, ...), readable by
        ``torch.load(path, weights_only=True)`` and Lightning's ``load_from_checkpoint``, plus fabricx's
        exact-resume entries. A path that names a file (``.ckpt``, ``.pt``, ...) is one file; any other path
        is a fabricx checkpoint folder with the same entries (so is a ``.ckpt`` under DeepSpeed, whose
        engines write their own files, as in Lightning). ``weights_only=True`` leaves out the optimizer and
        scheduler states. ``async_save=True`` writes in the background and returns its handle.

        Example:
            ```python
            trainer.save_checkpoint("checkpoints/manual.ckpt")
            ```
        """
        if self._model is None:
            raise AttributeError(
                "Saving a checkpoint is only possible if a model is attached to the Trainer. Did you call "
                "`Trainer.save_checkpoint()` before calling `Trainer.{fit,validate,test,predict}`? save_checkpoint() "
                "needs a module set up by fit/validate/test first."
            )
        if storage_options is not None:
            raise MisconfigurationError(
                "save_checkpoint(storage_options=...) is not supported; fabricx writes local files. Drop it."
            )
        from fabricx.checkpoint.background import wait_for_pending_save
        from fabricx.checkpoint.manager import claim_path, reserve_on_rank_zero
        from fabricx.train.lightning_checkpoint import checkpoint_state

        # Rank 0 claims the name until the save has committed (or failed): two jobs never write one file,
        # and a job killed in between leaves the previous file as it was.
        wait_for_pending_save()  # one save at a time (as Fabric.save does): the last one's claim is released
        claim = reserve_on_rank_zero(self._fabric, lambda: claim_path(filepath))
        try:
            storage = self._fabric.strategy.checkpoint_storage()
            layout = "directory" if storage is not None and not storage.full_state_in_one_file else None
            state = checkpoint_state(self, weights_only)
            callback_hooks = () if weights_only else self._hooks.callback_hooks("on_save_checkpoint")
            module_hook = self._hooks.module_hook("on_save_checkpoint")
            if callback_hooks or module_hook is not None:
                # As Lightning: the hooks see the checkpoint itself (its light entries as plain values, the
                # weights too where one file holds them) and may change, add or remove entries.
                checkpoint = ckpt.hook_view(state, with_weights=layout is None)
                for method in callback_hooks:
                    method(self, self._module, checkpoint)
                if module_hook is not None:
                    module_hook(checkpoint)
                state = ckpt.with_hook_changes(state, checkpoint)
            handle = self._fabric.save(filepath, state, async_save=async_save, layout=layout)
        except BaseException:
            if claim is not None:
                claim.release()
            raise
        if claim is not None:
            if handle is not None:
                handle.add_done_callback(claim.release)
            else:
                claim.release()
        return handle

    # -- running in each process ------------------------------------------------------------------------------
    def _launch(self, function: Any, *args: Any) -> Any:
        try:
            returned = self._fabric.launch(function, *args)
        except KeyboardInterrupt:
            # As Lightning: on_exception ran, loggers were finalized "failed", teardown ran; the process exits.
            rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
            sys.exit(1)
        if self._spawns and isinstance(returned, dict) and "__fabricx_spawn__" in returned:
            return self._apply_spawn_result(args[0], returned)
        return returned

    def _prepare_process(self, module: TrainModule, stage: str, datamodule: Any) -> None:
        if self._spawns and self.seed is not None:
            seed_everything(self.seed)
        self.state.fn = TrainerFn(stage)
        self.state.status = TrainerStatus.RUNNING
        self.state.stage = _ENTRY_STAGES[stage]
        self.should_stop = False
        self._reset_metrics()
        module.__dict__["_trainer"] = self
        self._module = module
        self._datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self
        self._automatic = bool(getattr(module, "automatic_optimization", True))
        self.callbacks = self._merge_module_callbacks(module)
        self._hooks = Hooks(self, module, self.callbacks)
        self._train_results.module = module
        self._batch_processor = batch_processor(module, datamodule, self._fabric.device)
        check_loop_configuration(self, module, stage)
        self._prepare_data(module, datamodule)

    def _reset_metrics(self) -> None:
        """As Lightning: each fit/validate/test/predict starts with no callback, logged or progress-bar metrics."""
        self._logger_connector.reset_metrics()
        self._train_results = ResultCollection("train", training=True)
        self._results = self._train_results

    def _merge_module_callbacks(self, module: TrainModule) -> list[Any]:
        """``configure_callbacks()`` results replace the Trainer's callbacks of the same types."""
        hook = getattr(module, "configure_callbacks", None)
        returned = hook() if callable(hook) else []
        extra = list(returned) if isinstance(returned, (list, tuple)) else ([returned] if returned else [])
        if not extra:
            return list(self._given_callbacks)
        kinds = {type(cb) for cb in extra}
        kept = [cb for cb in self._given_callbacks if type(cb) not in kinds]
        from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint

        merged = kept + extra
        checkpoints = [cb for cb in merged if isinstance(cb, ModelCheckpoint)]
        return [cb for cb in merged if not isinstance(cb, ModelCheckpoint)] + checkpoints

    def _prepare_data(self, module: TrainModule, datamodule: Any) -> None:
        """``prepare_data`` on the first process of each node (or global zero), then a barrier."""
        fabric = self._fabric
        for owner in (datamodule, module):
            hook = getattr(owner, "prepare_data", None) if owner is not None else None
            if not callable(hook):
                continue
            per_node = getattr(owner, "prepare_data_per_node", True)
            if (fabric.local_rank == 0) if per_node else fabric.is_global_zero:
                hook()
        if fabric.world_size > 1:
            fabric.barrier()

    def _call_setup(self, stage: str) -> None:
        if self._datamodule is not None and callable(getattr(self._datamodule, "setup", None)):
            self._datamodule.setup(stage=stage)
        self._hooks.call("setup", stage=stage)
        configure_model = self._hooks.module_hook("configure_model")
        if configure_model is not None:
            configure_model()

    def _call_teardown(self, stage: str) -> None:
        if self._datamodule is not None and callable(getattr(self._datamodule, "teardown", None)):
            self._datamodule.teardown(stage=stage)
        self._hooks.call("teardown", stage=stage)

    def _call_module_hook(self, name: str, *args: Any) -> Any:
        method = self._hooks.module_hook(name)
        return method(*args) if method is not None else None

    def _fit_in_process(
        self,
        fabric: Fabric,
        module: TrainModule,
        train_dataloaders: Any,
        val_dataloaders: Any,
        datamodule: Any,
        ckpt_path: Any,
    ) -> Any:
        self._prepare_process(module, "fit", datamodule)
        hooks = self._hooks
        try:
            self._call_setup("fit")
            self._setup_fit(module, train_dataloaders, val_dataloaders)
            path = select_ckpt_path(self, ckpt_path, "fit", model_provided=True) if fabric.is_global_zero else None
            if fabric.world_size > 1:
                path = fabric.broadcast(path)
            self._ckpt_path = path
            hooks.call("on_fit_start")
            module.zero_grad()
            if path is None and self.num_sanity_val_steps != 0 and self._may_validate():
                self._run_sanity_check()
            # As Lightning: the training data is requested after the sanity check (or earlier, by
            # estimated_stepping_batches in configure_optimizers).
            self._setup_fit_data()
            if path is not None:
                self._restore(path)
            self._log_hyperparams()
            # Read only for max_time: a time-based val_check_interval counts the clock's reads, as Lightning's does.
            self._fit_started_at = time.monotonic() if self.max_time is not None else None
            anomaly = torch.autograd.set_detect_anomaly(True) if self.detect_anomaly else contextlib.nullcontext()
            with anomaly:
                hooks.call("on_train_start")
                run_fit_loop(self)
                hooks.call("on_train_end")
            hooks.call("on_fit_end")
            self._finalize_loggers("success")
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            self._call_teardown("fit")
            self._report_profile()
            self._end_state()
        if self._spawns:
            return self._spawn_result(None)
        return None

    def _evaluate_in_process(
        self, fabric: Fabric, module: TrainModule, dataloaders: Any, datamodule: Any, ckpt_path: Any, stage: str
    ) -> Any:
        self._prepare_process(module, stage, datamodule)
        try:
            self._call_setup(stage)
            self._setup_module_only(module)
            self._load_weights_for(stage, ckpt_path)
            module.zero_grad()
            kind = "validate" if stage == "validate" else "test"
            limit = self.limit_val_batches if stage == "validate" else self.limit_test_batches
            loaders: list[Any] = []
            if limit != 0:  # as Lightning: a zero limit skips the loop without asking for its data
                raw = data.request_loaders(kind, dataloaders, datamodule, module, required=True)
                loaders = self._setup_eval_loaders(raw, f"Trainer.{stage}")
            flag = "limit_test_batches" if kind == "test" else "limit_val_batches"
            limits = [_limited_length(loader, limit, flag) for loader in loaders]
            results = ResultCollection(stage, training=False, module=module)
            self._eval_loaders[stage], self._eval_limits[stage] = loaders, limits
            if stage == "validate":
                self._val_limits = limits
                self._val_loaders = loaders
                self._val_limits_of_fit = False
            self._logger_connector.reset_metrics()
            metrics = run_evaluation(self, stage, results, loaders, limits)
            self._finalize_loggers("success")
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            self._call_teardown(stage)
            self._report_profile()
            self._end_state()
        return self._spawn_result(metrics) if self._spawns else metrics

    def _predict_in_process(
        self, fabric: Fabric, module: TrainModule, dataloaders: Any, datamodule: Any, ckpt_path: Any
    ) -> Any:
        self._prepare_process(module, "predict", datamodule)
        try:
            self._call_setup("predict")
            self._setup_module_only(module)
            self._load_weights_for("predict", ckpt_path)
            raw = data.request_loaders("predict", dataloaders, datamodule, module, required=True)
            loaders = self._setup_eval_loaders(raw, "Trainer.predict")
            limit = self.limit_predict_batches
            limits = [_limited_length(loader, limit, "limit_predict_batches") for loader in loaders]
            self._eval_loaders["predict"], self._eval_limits["predict"] = loaders, limits
            predictions = run_prediction(self, loaders, limits)
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            self._call_teardown("predict")
            self._report_profile()
            self._end_state()
        return self._spawn_result(predictions) if self._spawns else predictions

    def _load_weights_for(self, stage: str, ckpt_path: Any) -> None:
        if ckpt_path is None:
            self._ckpt_path = None
            return
        path = select_ckpt_path(self, ckpt_path, stage, model_provided=True)
        self._ckpt_path = path
        if path is None:
            return
        from fabricx.train.lightning_checkpoint import is_lightning_file, load_lightning_weights

        if is_lightning_file(path):
            assert self._module is not None
            load_lightning_weights(self._module, path)
        else:
            key = "module" if ckpt.is_legacy_folder(path) else "state_dict"
            self._fabric.load(path, {key: self._model}, strict=False)

    # -- set-up ----------------------------------------------------------------------------------------------
    def _setup_fit(self, module: TrainModule, train_dataloaders: Any, val_dataloaders: Any) -> None:
        fabric = self._fabric
        if self.sync_batchnorm and fabric.world_size > 1:
            if fabric.device.type == "cpu":
                raise MisconfigurationError(
                    "Trainer(sync_batchnorm=True) on CPU: torch.nn.SyncBatchNorm needs CUDA (or another "
                    "accelerator). Drop the flag on CPU, or run on GPUs."
                )
            if id(module) not in self._wrapped:
                torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        self._train_source = (train_dataloaders, self._datamodule, module)
        self._val_source = val_dataloaders
        self._train_loader = None
        self._val_loaders, self._val_limits, self._val_built = [], [], False
        self.num_training_batches = 0
        self._val_check_batch = 0
        self._val_enabled = self._may_validate()
        self._train_reload_epoch = self._val_reload_epoch = -math.inf
        optimizers, self._scheduler_configs = parse_optimizers(
            module.configure_optimizers(), manual=not self._automatic
        )
        for optimizer in optimizers:
            if isinstance(optimizer, torch.optim.LBFGS):
                raise MisconfigurationError(
                    "configure_optimizers returned torch.optim.LBFGS, which re-evaluates the closure inside "
                    "step(); the fabricx Trainer runs the closure once before the step, so LBFGS would not "
                    "train correctly. Use a first-order optimizer, or write the loop with Fabric and call "
                    "optimizer.step(closure) yourself."
                )
        if "dataloader_iter" in inspect.signature(module.training_step).parameters:
            raise MisconfigurationError(
                f"{type(module).__name__}.training_step takes `dataloader_iter`; the fabricx Trainer hands "
                "training_step one batch at a time. Write training_step(self, batch, batch_idx)."
            )
        if self._automatic and len(optimizers) > 1:
            raise MisconfigurationError(
                f"configure_optimizers returned {len(optimizers)} optimizers, but automatic optimization steps "
                "one. Training with several optimizers needs manual optimization: set "
                "self.automatic_optimization = False in __init__ and step them in training_step "
                "(opt_a, opt_b = self.optimizers(); self.manual_backward(loss); opt_a.step())."
            )
        wrapped = self._wrapped.get(id(module))
        if wrapped is None:
            set_up = fabric.setup(module, *optimizers)
            self._model = model = set_up[0]
            self._optimizers = list(set_up[1:])
            self._wrapped[id(module)] = model
        else:
            self._model = wrapped
            set_up = fabric.setup_optimizers(*optimizers)
            self._optimizers = list(set_up) if isinstance(set_up, tuple) else [set_up]
        self._module_optimizers = [TrainerOptimizer(opt, self, i) for i, opt in enumerate(self._optimizers)]
        self._step_schedulers_cache = [c for c in self._scheduler_configs if c.interval == "step"]
        self._epoch_schedulers_cache = [c for c in self._scheduler_configs if c.interval == "epoch"]
        self._make_step_functions()

        self._val_warned = False
        self._val_results = ResultCollection("validate", training=False, module=module)
        self._train_results = ResultCollection("train", training=True, module=module)
        self._results = self._train_results
        self.progress.reset()
        self.fit_loop.reset_progress()
        self._logger_connector.reset_metrics()
        if not module.training:
            # A module handed over in eval mode (e.g. after testing) trains in train mode; submodules
            # the user put in eval mode inside a training module stay as they are.
            module.train()

    def _setup_fit_data(self) -> None:
        """The training loader (unless built already) and the validation interval; the validation loaders now
        when the first epoch validates (as Lightning, for the progress bar), else when validation first runs."""
        self._ensure_train_loader()
        self._val_enabled = self._may_validate()
        if not self._val_warned:
            self._val_warned = True
            module = self._module
            has_data = self._val_source is not None or data.defines_loader(self._datamodule, module, "validate")
            warn_val_mismatch(module, has_data)
        if self._should_validate_this_epoch():
            self._ensure_val_loaders()
        self._compute_val_check_batch()
        if self.loggers and self.num_training_batches < self.log_every_n_steps and not self.fast_dev_run:
            rank_zero_warn(
                f"The number of training batches ({self.num_training_batches}) is smaller than the logging interval"
                f" Trainer(log_every_n_steps={self.log_every_n_steps}). Set a lower value for log_every_n_steps if"
                " you want to see logs for the training epoch.",
                category=PossibleUserWarning,
            )

    def _ensure_train_loader(self) -> None:
        if self._train_loader is None:
            self._train_loader = self._build_train_loader(self._train_source[0])
            self.num_training_batches = self._train_batches()
            self._train_reload_epoch = self.current_epoch

    def _train_batches(self) -> float:
        return _limited_length(self._train_loader, self.limit_train_batches, "limit_train_batches")

    def _ensure_val_loaders(self) -> None:
        """Build the validation loaders on first use, and again every ``reload_dataloaders_every_n_epochs``."""
        every = self.reload_dataloaders_every_n_epochs
        due = bool(every) and self.current_epoch - self._val_reload_epoch >= every
        if self._val_built and not due:
            return
        if not self._may_validate():
            return
        # As Lightning: a sanity check in an epoch that does not validate does not count as this epoch's load.
        if not self.sanity_checking or self._should_validate_this_epoch():
            self._val_reload_epoch = self.current_epoch
        if not self._val_built or self._val_source is None:
            self._build_val_loaders(self._val_source)
        self._val_built = True

    def _may_validate(self) -> bool:
        """Whether fit has validation at all: a validation_step, validation data and a non-zero limit."""
        if self.limit_val_batches == 0 or not defines_step(self._module, "validation_step"):
            return False
        return self._val_source is not None or data.defines_loader(self._datamodule, self._module, "validate")

    def _build_train_loader(self, given: Any) -> Any:
        """The training data as the fit loop runs it: one set-up loader, or a `LoaderGroup` for a collection."""
        raw = data.request_loaders("train", given, self._datamodule, self._module, required=True)
        flat, spec, mode, source = setup.flatten_loaders(raw)
        if mode == "sequential":
            raise ValueError(
                "`FitLoop` does not support the `CombinedLoader(mode='sequential')` mode. The available modes are: "
                "['min_size', 'max_size_cycle', 'max_size']. Give the training iterables in one of those modes."
            )
        if self.overfit_batches:
            changed = _without_shuffle(flat, "train")
        elif self._fabric.world_size > 1 and self.use_distributed_sampler:
            # As Lightning's Trainer: training data given to several processes is always shuffled
            # (each rank's DistributedSampler draws its share of one seeded permutation per epoch).
            changed = [_shuffled(loader) for loader in flat]
        else:
            changed = flat
        if any(new is not old for new, old in zip(changed, flat, strict=True)):
            source = None  # the group reports the rebuilt loaders
        loaders = self._setup_loaders(changed, "Trainer.fit(train_dataloaders)")
        if spec.kind == "leaf" and source is None:
            return loaders[0]
        return setup.LoaderGroup(loaders, spec, mode or "max_size_cycle", source)

    def _build_val_loaders(self, given: Any) -> None:
        module = self._module
        raw = None
        if defines_step(module, "validation_step"):
            raw = data.request_loaders("validate", given, self._datamodule, module, required=False)
        # Not `if raw`: the truth value of a loader is its len(), which an iterable dataset does not have.
        empty = raw is None or (isinstance(raw, (list, tuple, dict)) and not raw)
        self._val_loaders = [] if empty else self._setup_eval_loaders(raw, "Trainer.fit(val_dataloaders)", "val")
        self._val_limits = [
            _limited_length(loader, self.limit_val_batches, "limit_val_batches") for loader in self._val_loaders
        ]
        self._val_limits_of_fit = True

    def _compute_val_check_batch(self) -> None:
        """Validate every N batches (``inf``: at the end of an epoch of unknown length), as Lightning counts."""
        interval, batches = self.val_check_interval, self.num_training_batches
        if self.val_check_seconds is not None:
            # Time-based: the clock starts now and again after every validation.
            self._val_check_batch = math.inf
            self._last_val_time = time.monotonic()
        elif isinstance(interval, int) and not isinstance(interval, bool):
            self._val_check_batch = interval
            if 0 < batches < interval and self.check_val_every_n_epoch is not None and self.limit_val_batches != 0:
                raise ValueError(
                    f" `val_check_interval` ({interval}) must be less than or equal"
                    f" to the number of the training batches ({batches})."
                    " If you want to disable validation set `limit_val_batches` to 0.0 instead."
                    " If you want to validate based on the total training batches, set `check_val_every_n_epoch=None`."
                )
        elif math.isinf(batches):
            if interval not in (None, 1.0):
                raise MisconfigurationError(
                    "When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be "
                    f"time based, `1.0` or an int. An int k specifies checking validation every k training batches. "
                    f"val_check_interval={interval} is a fraction of an epoch, but the training loader has no "
                    "length: give an int (every N batches) instead."
                )
            self._val_check_batch = math.inf
        else:
            self._val_check_batch = max(1, int(batches * (1.0 if interval is None else interval)))

    def _maybe_reload_train_loader(self) -> None:
        every = self.reload_dataloaders_every_n_epochs
        if not every or self.current_epoch - self._train_reload_epoch < every:
            return
        given, _, _ = self._train_source
        if given is None:
            self._train_loader = self._build_train_loader(None)
            self.num_training_batches = self._train_batches()
        self._train_reload_epoch = self.current_epoch
        self._compute_val_check_batch()

    def _setup_module_only(self, module: TrainModule) -> None:
        wrapped = self._wrapped.get(id(module))
        if wrapped is None:
            wrapped = self._fabric.setup_module(module)
            self._wrapped[id(module)] = wrapped
        self._model = wrapped
        self._step_fns = {}

    def _setup_loaders(self, flat: list[Any], where: str) -> list[Any]:
        """Each of `flat` set up: a DataLoader on the Fabric, any other iterable as an `IterableLoader`."""
        if not flat:
            raise MisconfigurationError(f"{where} got an empty list of DataLoaders.")
        fabric, move = self._fabric, self._batch_processor is None

        def setup_dataloader(loader: Any) -> Any:
            return fabric.setup_dataloaders(
                loader, use_distributed_sampler=self.use_distributed_sampler, move_to_device=move
            )

        return [setup.setup_one(loader, setup_dataloader, fabric.to_device if move else None, where) for loader in flat]

    def _setup_eval_loaders(self, raw: Any, where: str, overfit_prefix: str | None = None) -> list[Any]:
        """One entry per `dataloader_idx`: each loader of a collection (or of a sequential `CombinedLoader`), or
        one `LoaderGroup` for a `CombinedLoader` in another mode (its batches combined, `dataloader_idx` 0)."""
        flat, spec, mode, source = setup.flatten_loaders(raw)
        if overfit_prefix is not None and self.overfit_batches:
            flat = _without_shuffle(flat, overfit_prefix)
        loaders = self._setup_loaders(flat, where)
        if mode is not None and mode != "sequential":
            return [setup.LoaderGroup(loaders, spec, mode, source)]
        return loaders

    def _validation_enabled(self) -> bool:
        """Lightning's ``enable_validation``: validation data, a validation_step and a non-zero limit (per fit)."""
        return self._val_enabled

    def _make_step_functions(self) -> None:
        self._step_fns = {}
        module = self._module
        assert module is not None, "the loop is built after the module is set up"
        hooks = self._hooks
        training_step = self._step_function("training_step")
        with_batch_idx = takes_batch_idx(module.training_step)
        self._before_optimizer_step_hooks = (
            hooks.callback_hooks("on_before_optimizer_step"),
            hooks.module_hook("on_before_optimizer_step"),
            hooks.module_hook("configure_gradient_clipping"),
        )
        if not self._automatic:

            def manual_step(batch: Any, batch_idx: int) -> Any:
                outputs = training_step(batch, batch_idx) if with_batch_idx else training_step(batch)
                _, reported = training_output(outputs, False, 1)
                return reported

            self._manual_step = manual_step
            return

        trainer = self
        scale = self._fabric.grad_accum_steps
        before_zero = hooks.callback_hooks("on_before_zero_grad")
        before_zero_module = hooks.module_hook("on_before_zero_grad")
        zero_grad_hook = module.optimizer_zero_grad
        optimizer_step_hook = module.optimizer_step
        optimizer = self._module_optimizers[0]
        backward = self._backward
        progress = self.progress
        counts = self.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer
        step_counts, zero_grad_counts = counts.step, counts.zero_grad

        def automatic_step(batch: Any, batch_idx: int, boundary: bool) -> Any:
            reported: dict[str, Any] = {}

            def closure() -> Any:
                outputs = training_step(batch, batch_idx) if with_batch_idx else training_step(batch)
                loss, found = training_output(outputs, True, scale)
                reported.update(found)
                if loss is None:
                    return None
                trainer._last_loss = found["loss"]
                if batch_idx % scale == 0:
                    zero_grad_counts.increment_ready()
                    for method in before_zero:
                        method(trainer, module, optimizer)
                    if before_zero_module is not None:
                        before_zero_module(optimizer)
                    zero_grad_counts.increment_started()
                    zero_grad_hook(trainer.current_epoch, batch_idx, optimizer)
                    zero_grad_counts.increment_completed()
                backward(loss)
                return found["loss"]

            if boundary:
                step_counts.increment_ready()
                optimizer_step_hook(trainer.current_epoch, batch_idx, optimizer, closure)
                step_counts.increment_completed()
                progress.global_step += 1
            else:
                closure()
            return reported

        self._automatic_step = automatic_step

    def _backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """on_before_backward -> backward (the module's ``backward`` hook when overridden) -> on_after_backward."""
        hooks = self._hooks
        module = self._module
        for method in hooks.callback_hooks("on_before_backward"):
            method(self, module, loss)
        hook = hooks.module_hook("on_before_backward")
        if hook is not None:
            hook(loss)
        custom = hooks.module_hook("backward")
        if custom is not None:
            custom(loss, *args, **kwargs)
        elif self._profiling:
            with self.profiler.profile("[Strategy]backward"):
                self._fabric.backward(loss, *args, **kwargs)
        else:
            self._fabric.backward(loss, *args, **kwargs)
        for method in hooks.callback_hooks("on_after_backward"):
            method(self, module)
        hook = hooks.module_hook("on_after_backward")
        if hook is not None:
            hook()

    def _report_profile(self) -> None:
        if self._profiling:
            self.profiler.describe()
            self.profiler.teardown()

    def _step_function(self, name: str) -> Any:
        function = self._step_fns.get(name)
        if function is None:
            model, module = self._model, self._module
            assert model is not None and module is not None, "step functions exist once the module is set up"
            function = step_caller(model, module, name, self._fabric.strategy)
            function = self._step_fns[name] = profiled(self.profiler, f"[Strategy]{name}", function)
        return function

    # -- the optimizer step ----------------------------------------------------------------------------------
    def _before_optimizer_step(self, optimizer: TrainerOptimizer) -> None:
        """Called by ``TrainerOptimizer.step`` after the closure: hooks, then (automatic) gradient clipping."""
        before, before_module, clipping = self._before_optimizer_step_hooks
        for method in before:
            method(self, self._module, optimizer)
        if before_module is not None:
            before_module(optimizer)
        if self._automatic:
            if clipping is not None:
                clipping(
                    optimizer,
                    gradient_clip_val=self.gradient_clip_val,
                    gradient_clip_algorithm=self.gradient_clip_algorithm,
                )
            elif self.gradient_clip_val:
                assert self._module is not None
                self._module.clip_gradients(
                    optimizer,
                    gradient_clip_val=self.gradient_clip_val,
                    gradient_clip_algorithm=self.gradient_clip_algorithm,
                )

    def _step_schedulers(self, interval: str, plateau: bool | None = None) -> None:
        # "step" frequencies count optimizer steps (Lightning counts batches, which differs under accumulation).
        counter = self.global_step if interval == "step" else self.current_epoch + 1
        assert self._module is not None
        hook = self._module.lr_scheduler_step
        counts = self.fit_loop.epoch_loop.scheduler_progress
        for config in self._scheduler_configs:
            if config.interval != interval or counter % config.frequency != 0:
                continue
            if plateau is not None and config.reduce_on_plateau != plateau:
                continue
            if config.reduce_on_plateau:
                metrics = self.callback_metrics
                if config.monitor not in metrics:
                    if not config.strict:
                        continue
                    raise MisconfigurationError(
                        f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available. Available "
                        f"metrics are: {sorted(metrics)}. Condition can be set using `monitor` key in lr scheduler "
                        f"dict. The lr_scheduler from configure_optimizers monitors {config.monitor!r}, which was not "
                        f"logged before the {interval}-interval scheduler step. Logged metrics: "
                        f"{sorted(metrics)}. Log it with self.log({config.monitor!r}, ...) or change monitor."
                    )
                counts.increment_ready()
                hook(config.scheduler, metrics[config.monitor])
            else:
                counts.increment_ready()
                hook(config.scheduler, None)
            counts.increment_completed()

    # -- validation inside fit ---------------------------------------------------------------------------------
    def _fit_is_done(self) -> bool:
        if self._train_loader is not None and self.num_training_batches == 0:
            return True  # as Lightning: no training batches, nothing to loop over
        if self.max_steps >= 0 and self.global_step >= self.max_steps:
            return True
        if self._time_is_up():
            return True
        return self.max_epochs is not None and self.max_epochs >= 0 and self.current_epoch >= self.max_epochs

    def _time_is_up(self) -> bool:
        return (
            self.max_time is not None
            and self._fit_started_at is not None
            and time.monotonic() - self._fit_started_at >= self.max_time
        )

    def _can_stop_early(self) -> bool:
        """``min_epochs``/``min_steps`` reached (a stop request before them is postponed, as in Lightning)."""
        if self.min_epochs is not None and self.current_epoch < self.min_epochs:
            return False
        return not (self.min_steps is not None and self.global_step < self.min_steps)

    def _should_end_epoch(self) -> bool:
        if self.max_steps >= 0 and self.global_step >= self.max_steps:
            return True
        if self._time_is_up():
            self.should_stop = True
            return True
        if not self.should_stop:
            return False
        if self._can_stop_early():
            return True
        if not self._stop_postponed_said:
            self._stop_postponed_said = True
            # Lightning names its parsed min_epochs: 1 when only min_steps is set, else 0.
            min_epochs = self.min_epochs if self.min_epochs is not None else (1 if self.min_steps is not None else 0)
            rank_zero_log_info(
                log,
                f"Trainer was signaled to stop but the required `min_epochs={min_epochs!r}` or"
                f" `min_steps={self.min_steps!r}` has not been met. Training will continue...",
            )
        return False

    def _should_validate_this_epoch(self) -> bool:
        every = self.check_val_every_n_epoch
        return every is None or (self.current_epoch + 1) % every == 0

    def _run_validation_in_fit(self) -> None:
        self.state.stage = RunningStage.VALIDATING
        try:
            # As Lightning: the loaders are built (or reloaded) when a validation runs.
            self._ensure_val_loaders()
            run_evaluation(self, "validate", self._val_results, self._val_loaders, self._val_limits)
            self._validation_ended(self._val_limits)
        finally:
            self.state.stage = RunningStage.TRAINING

    def _validation_ended(self, limits: list[float]) -> None:
        if any(limit > 0 for limit in limits):
            self._last_val_time = time.monotonic()  # the clock of a time-based val_check_interval restarts

    def _run_sanity_check(self) -> None:
        steps = self.num_sanity_val_steps
        # The check must not change what training does afterwards: random generators are put back.
        rng = capture_rng_states()
        self.sanity_checking = True
        try:
            self._hooks.call("on_sanity_check_start", module=False)
            self._ensure_val_loaders()
            limits = [limit if steps < 0 else min(limit, steps) for limit in self._val_limits]
            run_evaluation(self, "validate", self._val_results, self._val_loaders, limits, sanity=True)
            self._validation_ended(limits)
            self._hooks.call("on_sanity_check_end", module=False)
            self._logger_connector.reset_metrics()  # as Lightning: nothing logged in the check is kept
            self.fit_loop.epoch_loop.val_loop.reset_progress()  # nor counted
        finally:
            self.state.stage = RunningStage.TRAINING
            restore_rng_states(rng)

    # -- metrics -------------------------------------------------------------------------------------------------
    def _log_hyperparams(self) -> None:
        module = self._module
        if not self.enable_autolog_hparams or not isinstance(module, TrainModule):
            return
        if not module.__dict__.get("_log_hyperparams", True):
            return
        hparams = dict(module.hparams)
        if self._datamodule is not None and getattr(self._datamodule, "hparams", None):
            hparams.update(self._datamodule.hparams)
        if hparams and self._fabric.is_global_zero:
            for logger in self._loggers:
                logger.log_hyperparams(hparams)

    def _finalize_loggers(self, status: str) -> None:
        if self._fabric.is_global_zero:
            for logger in self._loggers:
                logger.finalize(status)

    def _end_state(self) -> None:
        if self.state.status == TrainerStatus.RUNNING:
            self.state.status = TrainerStatus.FINISHED
        self.state.stage = None

    def _on_exception(self, exception: BaseException) -> None:
        self.state.status = TrainerStatus.INTERRUPTED
        for method in self._hooks.callback_hooks("on_exception"):
            method(self, self._module, exception)
        datamodule_hook = getattr(self._datamodule, "on_exception", None)
        if callable(datamodule_hook):
            datamodule_hook(exception)
        try:
            self._finalize_loggers("failed")
        except Exception:  # the original exception matters more than a logger failing to close
            pass

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def _legacy_checkpoint_state(self, extras: ckpt.Extras) -> dict[str, Any]:
        """The entries of a checkpoint folder written by an earlier fabricx Trainer (before Lightning's keys)."""
        return {
            "module": self._model,
            "optimizers": {str(i): optimizer for i, optimizer in enumerate(self._optimizers)},
            "schedulers": {str(i): config.scheduler for i, config in enumerate(self._scheduler_configs)},
            "train_loader": self._train_loader,
            "trainer": ckpt.ProgressState(self),
            "datamodule": ckpt.DataModuleState(self),
            "hparams": HParamsState(self),
            "callbacks": ckpt.CallbackStates(self.callbacks),
            "metrics": ckpt.MetricStates(self),
            "extra": extras,
        }

    def _restore(self, path: str) -> None:
        extras = ckpt.Extras()
        if ckpt.is_legacy_folder(path):
            self._fabric.load(path, self._legacy_checkpoint_state(extras))
        else:
            extras.values = restore_lightning_keys(self, path)
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
        progress = self.progress
        loader = self._train_loader
        if progress.epoch_done:
            # Saved at the end of an epoch: continue with the next one.
            progress.current_epoch += 1
            progress.epoch_done = False
            state = loader.state_dict()
            if state["started"] and not state["finished"]:
                # The epoch was cut short (limit_train_batches, max_steps): drop the rest of it.
                _drop_rest_of_epoch(loader)
            progress.resumed_mid_epoch = False
        else:
            # Inside an epoch (also one cut by max_steps/max_time, whose end hooks ran before the save).
            progress.epoch_cut = False
            progress.resumed_mid_epoch = bool(loader.state_dict()["started"])
            if progress.resumed_mid_epoch:
                setup.warn_if_not_resumable(loader)

    # -- spawned processes -----------------------------------------------------------------------------------------
    def _spawn_result(self, result: Any) -> dict[str, Any]:
        module = self._module
        return {
            "__fabricx_spawn__": True,
            "result": result,
            "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()} if module is not None else None,
            "global_step": self.global_step,
            "current_epoch": self.current_epoch,
            "callback_metrics": {k: _cpu(v) for k, v in self.callback_metrics.items()},
            "logged_metrics": {k: _cpu(v) for k, v in self._logger_connector.logged.items()},
            "progress": self.progress.state_dict(),
            "callbacks": ckpt.CallbackStates(self.callbacks).state_dict(),
        }

    def _apply_spawn_result(self, module: TrainModule, returned: dict[str, Any]) -> Any:
        if returned["state_dict"] is not None:
            module.load_state_dict(returned["state_dict"])
        self.progress.load_state_dict(returned["progress"])
        self._logger_connector.callback = returned["callback_metrics"]
        self._logger_connector.logged = returned["logged_metrics"]
        ckpt.CallbackStates(self.callbacks).load_state_dict(returned["callbacks"])
        module.__dict__["_trainer"] = self
        self._module = module
        return returned["result"]


_ENTRY_STAGES = {
    "fit": RunningStage.TRAINING,
    "validate": RunningStage.VALIDATING,
    "test": RunningStage.TESTING,
    "predict": RunningStage.PREDICTING,
}


class _TrainerFabric(Fabric):
    """A Fabric that can be pickled into spawned processes (weak sets are sent as their items).

    It leaves a module's ``_fabric`` alone: a module the Trainer runs reaches everything through the Trainer.
    """

    _attaches_modules = False

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


def _drop_rest_of_epoch(loader: Any) -> None:
    for inner in loader.loaders if isinstance(loader, setup.LoaderGroup) else [loader]:
        state = inner.state_dict()
        if state["started"] and not state["finished"] and isinstance(inner.loader, torch.utils.data.DataLoader):
            iter(inner.loader)


def _per_iterable(loaders: list[Any] | None, limits: list[float], limit: int | float | None, flag: str) -> list[float]:
    """Lightning's ``num_*_batches``: one figure per iterable (those of a combined loader each counted)."""
    figures: list[float] = []
    for loader, run_limit in zip(loaders or [], limits, strict=False):
        if isinstance(loader, setup.LoaderGroup):
            figures.extend(_limited_length(inner, limit, flag) for inner in loader.loaders)
        else:
            figures.append(run_limit)
    return figures


def _user_view(loaders: list[Any] | None) -> Any:
    """Lightning's `trainer.val_dataloaders` (and test/predict): the user's loader, or a list of several."""
    if not loaders:
        return None
    views = [setup.user_loader(loader) for loader in loaders]
    return views[0] if len(views) == 1 else views


def _shuffled(loader: Any) -> Any:
    """A training loader in sequential order rebuilt with a ``RandomSampler`` (the trainer distributes it)."""
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

    if type(loader) is not DataLoader or type(loader.sampler) is not SequentialSampler:
        return loader
    return _rebuilt(loader, RandomSampler(cast(Sized, loader.dataset)))


def _rebuilt(loader: Any, sampler: Any) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers if loader.num_workers > 0 else False,
    )


def _without_shuffle(loaders: list[Any], prefix: str) -> list[Any]:
    """``overfit_batches``: the same first batches every epoch (a loader not in order is rebuilt in order)."""
    from torch.utils.data import DataLoader, SequentialSampler

    def in_order(loader: Any) -> bool:
        return not isinstance(loader, DataLoader) or isinstance(loader.sampler, SequentialSampler)

    if all(in_order(loader) for loader in loaders):
        return loaders
    rank_zero_warn(
        f"You requested to overfit but enabled {prefix} dataloader shuffling."
        f" We are turning off the {prefix} dataloader shuffling for you."
    )

    def rebuild(loader: Any) -> Any:
        # A loader with its own batch sampler keeps it: only the sampler of automatic batching can be swapped.
        if in_order(loader) or loader.batch_size is None:
            return loader
        return _rebuilt(loader, SequentialSampler(cast(Sized, loader.dataset)))

    return [rebuild(loader) for loader in loaders]


def _check_module(module: Any, where: str) -> None:
    # A module that is not a TrainModule is accepted when it has a training_step (a LightningModule from
    # another package that follows the same protocol); anything else is refused as Lightning refuses it.
    if not isinstance(module, TrainModule) and not (
        isinstance(module, torch.nn.Module) and callable(getattr(module, "training_step", None))
    ):
        raise TypeError(
            f"`model` must be a `LightningModule` (a fabricx.train.TrainModule), got `{type(module).__qualname__}`: "
            f"Trainer.{where}() runs a module that defines training_step/validation_step/...; subclass TrainModule."
        )
    if isinstance(module, TrainModule) and "_trainer" not in module.__dict__:
        raise FabricxError(
            f"{type(module).__name__}.__init__ did not call super().__init__(); add it as the first line."
        )


def _limited_length(loader: Any, limit: int | float | None, flag: str) -> float:
    """Batches of a pass under the ``limit_*_batches`` flag ``flag`` (``inf`` for a loader without a length)."""
    length = setup.sized_length(loader)
    if limit is None:
        return length
    if isinstance(limit, float):
        if math.isinf(length):
            if limit in (0.0, 1.0):
                return 0 if limit == 0.0 else length
            raise MisconfigurationError(
                f"When using an `IterableDataset`, `Trainer({flag})` must be `1.0` or an int (got {limit}): a "
                "fraction needs a loader with a length. An int specifies the number of batches to use."
            )
        return int(length * limit) if limit < 1.0 else length
    return min(length, limit)


__all__ = ["Trainer"]
