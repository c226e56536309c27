"""Lightning's read-only views of a `Trainer`: ranks and devices, the stage flags, the callbacks of a kind,
the metrics, the batch counts and data loaders of the current run.

They read only the Trainer's public state (`fabric`, `state`, `callbacks`, `progress`, `run_context`,
`fit_loop`, the flags), so the Trainer's own module holds just its entry points.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, overload

from fabricx.train.data import loaders as setup
from fabricx.train.data.loader_setup import per_iterable, user_view
from fabricx.train.states import RunningStage, TrainerFn, TrainerStatus, is_stage
from fabricx.utilities.exceptions import FabricxError

if TYPE_CHECKING:
    from torch import Tensor

    from fabricx.fabric import Fabric
    from fabricx.train.config.trainer_config import TrainerConfig
    from fabricx.train.loops.fit import FitLoop
    from fabricx.train.loops.progress import Progress
    from fabricx.train.module.module import TrainModule
    from fabricx.train.optim.optimizers import SchedulerConfig
    from fabricx.train.run_context import RunContext
    from fabricx.train.states import TrainerState
    from fabricx.wrappers import FabricModule


class _StageFlag:
    """``trainer.training`` and its kind: whether ``trainer.state.stage`` is this stage; setting it True enters the
    stage, setting it False leaves it (when the trainer is in it)."""

    def __init__(self, stage: RunningStage) -> None:
        self.stage = stage  # held by the flag: callbacks read these per batch, and an Enum member lookup costs

    @overload
    def __get__(self, trainer: None, owner: type | None = None) -> _StageFlag: ...
    @overload
    def __get__(self, trainer: object, owner: type | None = None) -> bool: ...
    def __get__(self, trainer: Any, owner: type | None = None) -> bool | _StageFlag:
        return self if trainer is None else is_stage(trainer.state.stage, self.stage)

    def __set__(self, trainer: Any, value: bool) -> None:
        if value:
            trainer.state.stage = self.stage
        elif trainer.state.stage == self.stage:
            trainer.state.stage = None


class TrainerProperties:
    """The properties Lightning's Trainer has, over the state a `Trainer` keeps (its base class).

    Example:
        ```python
        trainer.fit(model, loader)
        trainer.global_step, trainer.current_epoch, trainer.num_training_batches
        trainer.checkpoint_callback.best_model_path
        ```
    """

    fabric: Fabric
    config: TrainerConfig
    state: TrainerState
    callbacks: list[Any]
    progress: Progress
    run_context: RunContext
    fit_loop: FitLoop
    loggers: list[Any]
    default_root_dir: str
    max_epochs: int | None
    max_steps: int
    num_sanity_val_steps: int
    limit_val_batches: int | float | None
    limit_test_batches: int | float | None
    limit_predict_batches: int | float | None

    @property
    def module(self) -> TrainModule | None:
        """The module being run (the user's own object)."""
        return self.run_context.module

    @property
    def lightning_module(self) -> TrainModule | None:
        """The module being run (Lightning's name for `module`)."""
        return self.run_context.module

    @property
    def model(self) -> FabricModule | TrainModule | None:
        """The set-up (wrapped) module; the module itself while ``configure_optimizers`` runs (as in Lightning)."""
        return self.run_context.model

    @property
    def datamodule(self) -> Any:
        """The DataModule of the current (or last) run, or ``None``."""
        return self.run_context.datamodule

    @property
    def global_step(self) -> int:
        """Optimizer steps taken: the fit loop's optimizer-step count (`fit_loop.epoch_loop.global_step`)."""
        return self.fit_loop.epoch_loop.global_step

    @property
    def current_epoch(self) -> int:
        """The epoch being trained, from 0: the fit loop's completed epochs (`fit_loop.epoch_progress`)."""
        return self.fit_loop.current_epoch

    @property
    def is_last_batch(self) -> bool:
        return self.progress.is_last_batch

    @property
    def last_loss(self) -> Tensor | None:
        """The loss of the latest training batch (automatic optimization)."""
        return self.run_context.last_loss

    @property
    def optimizers(self) -> list[Any]:
        return self.run_context.optimizers

    @property
    def lr_scheduler_configs(self) -> list[SchedulerConfig]:
        return self.run_context.scheduler_configs

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        """The first logger's folder, or ``default_root_dir``."""
        log_dir = getattr(self.logger, "log_dir", None)
        return log_dir if log_dir is not None else self.default_root_dir

    @property
    def is_global_zero(self) -> bool:
        return self.fabric.is_global_zero

    @property
    def global_rank(self) -> int:
        return self.fabric.global_rank

    @property
    def local_rank(self) -> int:
        return self.fabric.local_rank

    @property
    def node_rank(self) -> int:
        return self.fabric.node_rank

    @property
    def world_size(self) -> int:
        return self.fabric.world_size

    @property
    def num_devices(self) -> int:
        """Processes per node."""
        return max(1, self.fabric.world_size // max(1, self.config.num_nodes))

    @property
    def num_nodes(self) -> int:
        return self.config.num_nodes

    @property
    def strategy(self) -> Any:
        return self.fabric.strategy

    @property
    def accelerator(self) -> Any:
        return self.fabric.accelerator

    @property
    def precision(self) -> str:
        """The precision setting, e.g. ``"32-true"``."""
        plugin = self.fabric.strategy.precision
        return str(getattr(plugin, "precision", self.config.precision or "32-true"))

    @property
    def device_ids(self) -> list[int]:
        device = self.fabric.device
        return [device.index if device.index is not None else self.local_rank]

    @property
    def accumulate_grad_batches(self) -> int:
        return self.fabric.grad_accum_steps

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, batches: int) -> None:
        # Between windows only (an epoch's start): `GradientAccumulationScheduler` sets it, as in Lightning.
        self.fabric.grad_accum_steps = batches

    # Lightning's stage flags: reading says whether the stage runs now; setting True enters it, False leaves it.
    training = _StageFlag(RunningStage.TRAINING)
    sanity_checking = _StageFlag(RunningStage.SANITY_CHECKING)  # the validation batches before training
    validating = _StageFlag(RunningStage.VALIDATING)
    testing = _StageFlag(RunningStage.TESTING)
    predicting = _StageFlag(RunningStage.PREDICTING)

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """Metrics callbacks can monitor: the latest value of every name, as in Lightning.

        A metric logged with ``on_step=True, on_epoch=True`` appears as ``name_step``, ``name_epoch``
        and ``name``: the step value during the epoch, the epoch value once the epoch ended. Validation and
        test step values are not here (only in `logged_metrics`)."""
        return self.run_context.logger_connector.callback_metrics()

    @property
    def logged_metrics(self) -> dict[str, Any]:
        """The latest value of every metric meant for the loggers (without ``epoch``), as in Lightning."""
        return self.run_context.logger_connector.logged_metrics()

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """Metrics logged with ``prog_bar=True`` (latest values, as numbers; ``name_step``/``name_epoch``)."""
        return self.run_context.logger_connector.progress_bar_metrics()

    @property
    def stage_metric_names(self) -> set[str]:
        """Names logged so far in the stage that runs now (training, validation, test)."""
        results = self.run_context.results
        return results.names() if results is not None else set()

    @property
    def num_training_batches(self) -> float:
        """Training batches per epoch under ``limit_train_batches`` (``inf`` for a loader without a length)."""
        return self.fit_loop.data.num_training_batches

    @num_training_batches.setter
    def num_training_batches(self, value: float) -> None:
        self.fit_loop.data.num_training_batches = value

    @property
    def num_val_batches(self) -> list[float]:
        data = self.fit_loop.data
        return per_iterable(data.val_loaders, data.val_limits, self.limit_val_batches, "limit_val_batches")

    @property
    def train_dataloader(self) -> Any:
        """The training loader(s) of the current fit as they were given (a dict/list for several), as Lightning's."""
        loader = self.fit_loop.data.train_loader
        return None if loader is None else setup.user_loader(loader)

    @property
    def val_dataloaders(self) -> Any:
        """The set-up validation loader (a list when there are several)."""
        return user_view(self.fit_loop.data.val_loaders)

    @property
    def estimated_stepping_batches(self) -> float:
        """Optimizer steps the whole fit will take (``max_steps`` when set; ``inf`` for unsized data)."""
        if self.max_steps >= 0 and (self.max_epochs is None or self.max_epochs < 0):
            return self.max_steps
        fit_data = self.fit_loop.data
        if fit_data.train_loader is None and self.state.fn == TrainerFn.FITTING and fit_data.started:
            # Asked before the loop starts (configure_optimizers, e.g. for OneCycleLR): load the data now.
            fit_data.ensure_train_loader()
        batches = fit_data.num_training_batches
        if fit_data.train_loader is None:
            raise FabricxError("estimated_stepping_batches is known once fit has set up the training data.")
        if math.isinf(batches):
            return self.max_steps if self.max_steps >= 0 else math.inf
        per_epoch = math.ceil(batches / self.accumulate_grad_batches)
        epochs = self.max_epochs if self.max_epochs is not None and self.max_epochs >= 0 else math.inf
        total = per_epoch * epochs
        return min(total, self.max_steps) if self.max_steps >= 0 else total

    @property
    def val_check_batch(self) -> int | float:
        """Fit validates every this many training batches (``inf``: at the end of an epoch of unknown length, or
        on a clock); set when fit sets up its training data."""
        return self.fit_loop.data.val_check_batch

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """The `Checkpoint` callbacks (`ModelCheckpoint`, `OnExceptionCheckpoint`, a user's own), as Lightning's."""
        from fabricx.train.callbacks.base import Checkpoint

        return [cb for cb in self.callbacks if isinstance(cb, Checkpoint)]

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
        """The `ProgressBar` among the callbacks (a user's own subclass too), or ``None``."""
        from fabricx.train.callbacks.progress import ProgressBar

        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        from fabricx.train.callbacks.early_stopping import EarlyStopping

        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def enable_validation(self) -> bool:
        """Whether fit validates (validation data, a validation_step and a non-zero batch limit)."""
        return self.fit_loop.data.val_enabled

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
        if not self.fit_loop.data.val_limits_of_fit:
            return []  # as Lightning: fit's figure (validate() alone has no sanity check)
        return [limit if steps < 0 else min(limit, steps) for limit in self.num_val_batches]

    @property
    def num_test_batches(self) -> list[float]:
        loaders, limits = self.run_context.eval_loaders.get("test"), self.run_context.eval_limits.get("test", [])
        return per_iterable(loaders, limits, self.limit_test_batches, "limit_test_batches")

    @property
    def num_predict_batches(self) -> list[float]:
        loaders, limits = self.run_context.eval_loaders.get("predict"), self.run_context.eval_limits.get("predict", [])
        return per_iterable(loaders, limits, self.limit_predict_batches, "limit_predict_batches")

    @property
    def test_dataloaders(self) -> Any:
        return user_view(self.run_context.eval_loaders.get("test"))

    @property
    def predict_dataloaders(self) -> Any:
        return user_view(self.run_context.eval_loaders.get("predict"))

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:
        return self.fabric.strategy.distributed_sampler_kwargs

    @property
    def precision_plugin(self) -> Any:
        return self.fabric.strategy.precision

    @property
    def scaler(self) -> Any:
        """The grad scaler of ``"16-mixed"`` (``None`` otherwise)."""
        return getattr(self.fabric.strategy.precision, "scaler", None)


__all__ = ["TrainerProperties"]
