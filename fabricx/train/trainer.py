"""``Trainer``: drives a `fabricx.train.TrainModule` through a `fabricx.Fabric`."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

import torch

from fabricx.fabric import Fabric
from fabricx.train.callbacks.callback_setup import trainer_callbacks, with_module_callbacks
from fabricx.train.checkpoint.ckpt_path import select_ckpt_path
from fabricx.train.checkpoint.connector import CheckpointConnector
from fabricx.train.config import flag_checks
from fabricx.train.config.env_defaults import defaults_from_env_vars
from fabricx.train.config.trainer_config import TrainerConfig
from fabricx.train.data import data_connector as data
from fabricx.train.data.loader_setup import limited_length, setup_eval_loaders
from fabricx.train.data.loaders import shutdown_workers
from fabricx.train.logging.logging_result import ResultCollection
from fabricx.train.loops.evaluation import run_evaluation, run_prediction
from fabricx.train.loops.fit import FitLoop
from fabricx.train.loops.loop_checks import check_loop_configuration
from fabricx.train.loops.loop_objects import EvaluationLoop, PredictionLoop
from fabricx.train.loops.progress import Progress
from fabricx.train.loops.training_steps import TrainingSteps
from fabricx.train.module.hparams import drop_unpicklable_hparams, hparams_to_log
from fabricx.train.module.module import TrainModule
from fabricx.train.module.module_export import log_graph_to_loggers
from fabricx.train.run_context import RunContext
from fabricx.train.spawn_transport import TrainerFabric, apply_spawn_result, is_spawn_result, spawn_result
from fabricx.train.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
from fabricx.train.trainer_properties import TrainerProperties
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError
from fabricx.utilities.keywords import suggest_keywords
from fabricx.utilities.profilers import Profiler
from fabricx.utilities.rank_zero import rank_zero_info
from fabricx.utilities.seed import seed_everything

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from datetime import timedelta

    from fabricx.accelerators.accelerator import Accelerator
    from fabricx.capabilities import LoggerLike
    from fabricx.connector import Plugin
    from fabricx.flags import AcceleratorName, StrategyName
    from fabricx.strategies.strategy import Strategy
    from fabricx.train.callbacks.base import Callback


class Trainer(TrainerProperties):
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
        trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn",
                          max_epochs=5, seed=0)
        trainer.fit(MyModule(), train_loader, val_loader)
        # resumes exactly
        trainer.fit(MyModule(), train_loader, val_loader, ckpt_path="last")
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
    @suggest_keywords
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
        self._loggers = config.logger_objects()
        self._fabric = TrainerFabric(**config.fabric_flags(), loggers=self._loggers)
        self._spawns = bool(getattr(self._fabric.strategy.launcher, "requires_function", False))  # results come back
        self.callbacks = trainer_callbacks(config)
        self._init_run_state()

    def _init_run_state(self) -> None:
        """The state of a run, empty until an entry point fills it: the set-up objects (`run_context`), the
        progress, and Lightning's loop objects (their counters are checkpointed under `loops`)."""
        self._given_callbacks = list(self.callbacks)  # configure_callbacks() replaces kinds among these per run
        self.progress = Progress()
        self._run = RunContext(self, self._fabric, self.profiler, self.callbacks)
        self.checkpoint_connector = CheckpointConnector(self)
        self._steps = self._run.steps = TrainingSteps(self, self._run)
        self.fit_loop = FitLoop(self, self._run, self._steps)
        self.progress.count_from(self.fit_loop)
        self._data = self.fit_loop.data
        self.validate_loop = EvaluationLoop()
        self.test_loop = EvaluationLoop()
        self.predict_loop = PredictionLoop()
        self.should_stop = False
        self.state = TrainerState()

    # -- public properties -----------------------------------------------------------------------------------
    @property
    def fabric(self) -> Fabric:
        """The `fabricx.Fabric` running this trainer's processes."""
        return self._fabric

    @property
    def loggers(self) -> list[Any]:
        return self._loggers

    @property
    def _results(self) -> ResultCollection | None:
        """The collection ``self.log`` writes to (Lightning's private name, which its tests read)."""
        return self._run.results

    @property
    def run_context(self) -> RunContext:
        """The objects the current (or last) fit/validate/test/predict set up: the module and its set-up model,
        optimizers, hooks, metric collections (what the loops and the training step share)."""
        return self._run

    def init_module(self, empty_init: bool | None = None) -> Any:
        """A context to build the module in (on the device, in the precision's dtype; see ``Fabric.init_module``)."""
        return self._fabric.init_module(empty_init=empty_init)

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the current run was restored from."""
        return self._run.ckpt_path

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
        weights_only: bool | None = None,
    ) -> None:
        """Train ``model``; ``ckpt_path`` (a checkpoint, ``"last"``, ``"best"``) resumes exactly where it stopped.

        ``weights_only`` (on every entry point) is Lightning's flag, accepted for its signature: fabricx never runs
        code from a checkpoint file.

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
        self.max_epochs = flag_checks.fit_max_epochs(self.max_epochs, self.max_steps, self.max_time, self.callbacks)
        self._launch(self._fit_in_process, model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)

    def validate(
        self,
        model: TrainModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | os.PathLike | None = None,
        verbose: bool = True,
        datamodule: Any = None,
        weights_only: bool | None = None,
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
        weights_only: bool | None = None,
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
        weights_only: bool | None = None,
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
        self.predict_loop.return_predictions = return_predictions is not False
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
            model = self._run.module
            if model is None:
                raise TypeError(
                    f"`Trainer.{stage}()` requires a `LightningModule` when it hasn't been passed in a previous run: "
                    f"this trainer got no model and has not fitted one. Pass trainer.{stage}(model, ...)."
                )
        _check_module(model, stage)
        ckpt_path = select_ckpt_path(self, ckpt_path, stage, model_provided=given)
        run = self._run
        if datamodule is None and dataloaders is None and run.datamodule is not None and model is run.module:
            datamodule = run.datamodule
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
        if self._run.model is None:
            raise AttributeError(
                "Saving a checkpoint is only possible if a model is attached to the Trainer. Did you call "
                "`Trainer.save_checkpoint()` before calling `Trainer.{fit,validate,test,predict}`? save_checkpoint() "
                "needs a module set up by fit/validate/test first."
            )
        # Rank 0 claims the name until the save has committed (or failed): two jobs never write one file, and a
        # job killed in between leaves the previous file as it was. The hooks run inside the claim.
        connector = self.checkpoint_connector
        return self.fabric.checkpointer.save(
            filepath,
            lambda: connector.dump_checkpoint(weights_only, filepath),
            layout=connector.layout(storage_options),
            mode="async" if async_save else "sync",
            exclusive=True,
        )

    # -- running in each process ------------------------------------------------------------------------------
    def _launch(self, function: Any, *args: Any) -> Any:
        try:
            returned = self._fabric.launch(function, *args)
        except KeyboardInterrupt:
            # As Lightning: on_exception ran, loggers were finalized "failed", teardown ran; the process exits.
            rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
            sys.exit(1)
        except BaseException:
            if self._spawns and args[0] is not None:
                # As Lightning's, whose main process holds the module from the start: `lightning_module` is the
                # module after a spawned run failed too (it was attached only in the spawned processes).
                self._run.attach(self, args[0], self._run.datamodule)
            raise
        if self._spawns and is_spawn_result(returned):
            return apply_spawn_result(self, args[0], returned)
        return returned

    def _prepare_process(self, module: TrainModule, stage: str, datamodule: Any) -> None:
        if self._spawns and self.seed is not None:
            seed_everything(self.seed)
        self.state.fn = TrainerFn(stage)
        self.state.status = TrainerStatus.RUNNING
        self.state.stage = _ENTRY_STAGES[stage]
        self.should_stop = False
        run = self._run
        run.reset_metrics()
        drop_unpicklable_hparams(module.hparams)
        run.attach(self, module, datamodule)
        self.callbacks = with_module_callbacks(self._given_callbacks, module)
        run.use_callbacks(self, self.callbacks)
        check_loop_configuration(self, module, stage)
        run.prepare_data()

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
        run, hooks, fit_loop = self._run, self._run.hooks, self.fit_loop
        try:
            run.call_setup("fit")
            path = select_ckpt_path(self, ckpt_path, "fit", model_provided=True) if fabric.is_global_zero else None
            if fabric.world_size > 1:
                path = fabric.broadcast(path)
            run.ckpt_path = path
            # As Lightning: the checkpoint is read once; the module's weights and the callbacks' states are
            # restored before configure_optimizers (the strategy's setup), the optimizer, loop and data states after.
            connector = self.checkpoint_connector
            connector.resume_start(path)
            connector.restore_modules_and_callbacks()
            self._setup_fit(module, train_dataloaders, val_dataloaders)
            connector.reload_cast_weights()
            hooks.call("on_fit_start")
            self._log_hyperparams()  # as Lightning: every entry point, after on_fit_start, before the sanity check
            module.zero_grad()
            if path is None and self.num_sanity_val_steps != 0 and self._data.may_validate():
                fit_loop.run_sanity_check()
            # As Lightning: the training data is requested after the sanity check (or earlier, by
            # estimated_stepping_batches in configure_optimizers).
            self._data.setup_fit_data()
            connector.restore_training_state()
            connector.resume_end()
            fit_loop.start_clock()
            anomaly = torch.autograd.set_detect_anomaly(True) if self.detect_anomaly else contextlib.nullcontext()
            # As Lightning's fit loop: training turns gradients on whatever mode fit was called in (a caller's
            # torch.no_grad left on), and leaves them on.
            torch.set_grad_enabled(True)
            with anomaly:
                fit_loop.warn_if_modules_in_eval_mode()
                hooks.call("on_train_start")
                fit_loop.run()
                hooks.call("on_train_end")
            hooks.call("on_fit_end")
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            self.checkpoint_connector.resume_end()
            self._close_run("fit")
            self.checkpoint_connector.teardown_io()  # last: an asynchronous plugin raises a failed save here
        return spawn_result(self, None) if self._spawns else None

    def _close_run(self, stage: str) -> None:
        """However an entry point ends: the loaders' workers stopped; then, as Lightning, after a run that did not
        raise, the teardown hooks and the loggers finalized ``"success"`` (a run that raised had ``on_exception``
        and its loggers finalized ``"failed"``, and calls no teardown hook that could hide its error); the profile
        reported and the final state set."""
        self._shutdown_loader_workers(stage)
        if self.state.status == TrainerStatus.RUNNING:
            self._run.call_teardown(stage)
            self._finalize_loggers("success")
        self._run.report_profile()
        self._end_state()

    def _shutdown_loader_workers(self, stage: str) -> None:
        # As Lightning's loops when an entry point returns: the loaders' worker processes end, their positions
        # kept for a checkpoint written afterwards. Else they would live as long as this Trainer, a reference
        # cycle that only a garbage collection ends, and there torch waits 5 s for each worker.
        data = self._data
        loaders = [data.train_loader, *data.val_loaders] if stage == "fit" else self._run.eval_loaders.get(stage, [])
        shutdown_workers(*loaders)

    def _evaluate_in_process(
        self, fabric: Fabric, module: TrainModule, dataloaders: Any, datamodule: Any, ckpt_path: Any, stage: str
    ) -> Any:
        with self._evaluation_run(module, stage, datamodule, ckpt_path) as run:
            kind = "validate" if stage == "validate" else "test"
            limit = self.limit_val_batches if stage == "validate" else self.limit_test_batches
            loaders: list[Any] = []
            if limit != 0:  # as Lightning: a zero limit skips the loop without asking for its data
                raw = data.request_loaders(kind, dataloaders, datamodule, module, required=True, profiler=run.profiler)
                loaders = setup_eval_loaders(self, run, raw, f"Trainer.{stage}")
            flag = "limit_test_batches" if kind == "test" else "limit_val_batches"
            limits = [limited_length(loader, limit, flag) for loader in loaders]
            results = ResultCollection(stage, training=False, module=module)
            run.eval_loaders[stage], run.eval_limits[stage] = loaders, limits
            if stage == "validate":
                self._data.set_eval_loaders(loaders, limits)
            run.logger_connector.reset_metrics()
            metrics = run_evaluation(self, run, stage, results, loaders, limits)
        return spawn_result(self, metrics) if self._spawns else metrics

    def _predict_in_process(
        self, fabric: Fabric, module: TrainModule, dataloaders: Any, datamodule: Any, ckpt_path: Any
    ) -> Any:
        with self._evaluation_run(module, "predict", datamodule, ckpt_path) as run:
            raw = data.request_loaders("predict", dataloaders, datamodule, module, required=True, profiler=run.profiler)
            loaders = setup_eval_loaders(self, run, raw, "Trainer.predict")
            limit = self.limit_predict_batches
            limits = [limited_length(loader, limit, "limit_predict_batches") for loader in loaders]
            run.eval_loaders["predict"], run.eval_limits["predict"] = loaders, limits
            predictions = run_prediction(self, run, loaders, limits)
        return spawn_result(self, predictions) if self._spawns else predictions

    @contextlib.contextmanager
    def _evaluation_run(self, module: TrainModule, stage: str, datamodule: Any, ckpt_path: Any) -> Iterator[RunContext]:
        """A validate/test/predict run in this process: the module set up with its checkpoint's weights; however the
        run ends, ``on_exception`` when it failed, then the loaders' workers stopped, teardown and the final state."""
        self._prepare_process(module, stage, datamodule)
        run = self._run
        try:
            run.call_setup(stage)
            run.setup_module_only(module)
            self._load_weights_for(stage, ckpt_path)
            self._log_hyperparams()
            module.zero_grad()  # as Lightning, before every stage's loop
            yield run
        except BaseException as exception:
            self._on_exception(exception)
            raise
        finally:
            self._close_run(stage)

    def _load_weights_for(self, stage: str, ckpt_path: Any) -> None:
        run = self._run
        run.ckpt_path = None if ckpt_path is None else select_ckpt_path(self, ckpt_path, stage, model_provided=True)
        path = run.ckpt_path
        if path is None:
            return
        from fabricx.train.checkpoint.entries import is_legacy_folder
        from fabricx.train.checkpoint.lightning_files import is_lightning_file, restore_weights

        with self.checkpoint_connector.reading(path):  # through a checkpoint I/O plugin where one wrote it
            if is_lightning_file(path) or self.checkpoint_connector.file_io is not None:
                assert run.module is not None
                restore_weights(run.module, path, self._fabric.load(path))
            else:
                key = "module" if is_legacy_folder(path) else "state_dict"
                self._fabric.load(path, {key: run.model}, strict=False)

    def _setup_fit(self, module: TrainModule, train_dataloaders: Any, val_dataloaders: Any) -> None:
        fabric = self._fabric
        if self.sync_batchnorm and fabric.world_size > 1:
            if fabric.device.type == "cpu":
                raise MisconfigurationError(
                    "Trainer(sync_batchnorm=True) on CPU: torch.nn.SyncBatchNorm needs CUDA (or another "
                    "accelerator). Drop the flag on CPU, or run on GPUs."
                )
            if id(module) not in self._run.wrapped:
                torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)
        self._data.start_fit(train_dataloaders, val_dataloaders)
        self._run.setup_for_fit(module)
        self._steps.build()
        self._run.new_fit_results()
        self.progress.reset()
        self.fit_loop.reset_progress()
        if not module.training:
            # A module handed over in eval mode (e.g. after testing) trains in train mode; submodules
            # the user put in eval mode inside a training module stay as they are.
            module.train()

    # -- loggers and the end of a run --------------------------------------------------------------------------
    def _log_hyperparams(self) -> None:
        module, datamodule = self._run.module, self._run.datamodule
        if not self.enable_autolog_hparams or not isinstance(module, TrainModule) or not self._fabric.is_global_zero:
            return
        hparams = hparams_to_log(module, datamodule) if self._loggers else None
        if hparams is not None:
            for logger in self._loggers:
                logger.log_hyperparams(hparams)
        log_graph_to_loggers(module, self._loggers)  # as Lightning, after the hyperparameters
        for logger in self._loggers:
            logger.save()

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
        self.fit_loop.rewind_interrupted_validation()
        for method in self._run.hooks.callback_hooks("on_exception"):
            _keeping_the_original(exception, method, self, self._run.module, exception)
        _keeping_the_original(exception, self.checkpoint_connector.run_after_hook_writes)
        _keeping_the_original(exception, self._run.call_datamodule_hook, "on_exception", exception)
        try:
            self._finalize_loggers("failed")
        except Exception:  # the original exception matters more than a logger failing to close
            pass


def _keeping_the_original(exception: BaseException, hook: Any, *args: Any) -> None:
    """Call an ``on_exception`` hook; if it fails too, the run's own exception still propagates, carrying a note
    of the hook's failure (otherwise the hook's error would be all a user or a launcher's log shows)."""
    try:
        hook(*args)
    except Exception as failure:
        where = traceback.extract_tb(failure.__traceback__)[-1]
        note = (
            f"While handling it, an on_exception hook raised {type(failure).__name__}: {failure} "
            f"({where.filename}:{where.lineno}, in {where.name})"
        )
        # What BaseException.add_note does (3.11+; this package supports 3.10, whose tracebacks do not print it).
        exception.__notes__ = [*getattr(exception, "__notes__", ()), note]  # type: ignore[attr-defined]


_ENTRY_STAGES = {
    "fit": RunningStage.TRAINING,
    "validate": RunningStage.VALIDATING,
    "test": RunningStage.TESTING,
    "predict": RunningStage.PREDICTING,
}


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


__all__ = ["Trainer"]
