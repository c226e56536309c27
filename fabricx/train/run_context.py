"""What one `fit`/`validate`/`test`/`predict` sets up, shared by the loops, the training step and the checkpoint.

The Trainer keeps its flags and its public properties; everything an entry point builds (the module and
its set-up model, the optimizers and schedulers, the hooks, the metric collections, the batch processor)
lives in one `RunContext`, which the loops, `TrainingSteps` and the checkpoint entries are handed
explicitly, so that none of them reads the Trainer's private attributes.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from fabricx.train.data.batch_transfer import batch_processor
from fabricx.train.logging.logger_connector import LoggerConnector
from fabricx.train.logging.logging_result import ResultCollection
from fabricx.train.module.current_hook import call_hook
from fabricx.train.module.hooks import Hooks
from fabricx.train.module.overrides import is_overridden
from fabricx.train.optim.optimizer_proxy import StepDriver, TrainerOptimizer
from fabricx.train.optim.optimizers import SchedulerConfig, parse_optimizers
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.profilers import PassThroughProfiler, Profiler, profiled
from fabricx.wrappers.step_methods import step_caller

if TYPE_CHECKING:
    from fabricx.fabric import Fabric
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer
    from fabricx.wrappers import FabricModule


class RunContext:
    """The set-up objects of the current (or last) run of a Trainer, as `trainer.run_context`.

    Example:
        ```python
        trainer.fit(model, loader)
        trainer.run_context.model          # the set-up (wrapped) module
        trainer.run_context.hooks.call("on_train_epoch_start")
        ```
    """

    def __init__(self, trainer: Trainer, fabric: Fabric, profiler: Profiler, callbacks: list[Any]) -> None:
        self.fabric = fabric
        self.profiler = profiler
        self.profiling = not isinstance(profiler, PassThroughProfiler)  # checked in every step: a bool
        self.module: TrainModule | None = None
        self.datamodule: Any = None
        self.model: FabricModule | TrainModule | None = None
        # One set-up model per module object: a second fit of the same module reuses it.
        self.wrapped: dict[int, FabricModule] = {}
        self.optimizers: list[Any] = []
        self.module_optimizers: list[TrainerOptimizer] = []
        self.scheduler_configs: list[SchedulerConfig] = []
        self.automatic = True
        self.hooks = Hooks(trainer, None, callbacks)
        self.batch_processor: Any = None
        self.logger_connector = LoggerConnector(trainer)
        self.train_results = ResultCollection("train", training=True)
        self.val_results = ResultCollection("validate", training=False)
        self.results = self.train_results
        self.last_loss: torch.Tensor | None = None
        # The training aggregates of an epoch cut by max_steps/max_time, saved by its epoch-end checkpoints.
        self.cut_metric_state: dict[str, Any] | None = None
        self.ckpt_path: str | None = None
        self.eval_loaders: dict[str, list[Any]] = {}
        self.eval_limits: dict[str, list[float]] = {}
        self.steps: StepDriver | None = None  # set by the Trainer (the training step needs this context)
        self._step_fns: dict[str, Any] = {}

    @property
    def results(self) -> ResultCollection | None:
        """The collection ``self.log`` writes to: the running loop's."""
        return self.logger_connector.results

    @results.setter
    def results(self, results: ResultCollection | None) -> None:
        self.logger_connector.set_results(results)

    def attach(self, trainer: Trainer, module: TrainModule, datamodule: Any) -> None:
        """Make `module` (and `datamodule`) the ones this run of `trainer` drives."""
        module.__dict__["_trainer"] = trainer
        self.module = module
        self.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = trainer
        self.automatic = bool(getattr(module, "automatic_optimization", True))

    def use_callbacks(self, trainer: Trainer, callbacks: list[Any]) -> None:
        """The run's hooks: the attached module's and these callbacks' (looked up anew)."""
        self.hooks = Hooks(trainer, self.module, callbacks)
        self.train_results.module = self.module
        self.batch_processor = batch_processor(self.module, self.datamodule, self.fabric.device)

    def reset_metrics(self) -> None:
        """As Lightning: each entry point starts with no callback, logged or progress-bar metrics."""
        self.logger_connector.reset_metrics()
        self.train_results = ResultCollection("train", training=True, module=self.module)
        self.results = self.train_results

    def new_fit_results(self) -> None:
        """Fresh training and validation collections for a new fit (a cut epoch's aggregates were the last fit's)."""
        self.val_results = ResultCollection("validate", training=False, module=self.module)
        self.cut_metric_state = None
        self.reset_metrics()

    def setup_module_only(self, module: TrainModule) -> None:
        """The module set up for evaluation (the model of an earlier fit of it is reused)."""
        wrapped = self.wrapped.get(id(module))
        if wrapped is None:
            wrapped = self.wrapped[id(module)] = self.fabric.setup_module(module)
        self.model = wrapped
        self._step_fns = {}

    def setup_for_fit(self, module: TrainModule) -> None:
        """``configure_optimizers``, checked as Lightning checks it, and the module and optimizers set up."""
        wrapped = self.wrapped.get(id(module))
        # As Lightning: `trainer.model` inside configure_optimizers is the module (set up once the optimizers exist).
        self.model = wrapped if wrapped is not None else module
        optimizers, configs = self._configured_optimizers(module)
        if wrapped is None:
            set_up = self.fabric.setup(module, *optimizers)
            self.model = self.wrapped[id(module)] = set_up[0]
            self._use_optimizers(list(set_up[1:]), configs)
        else:
            self.model = wrapped
            self._use_optimizers(self._set_up_optimizers(optimizers), configs)
        self._step_fns = {}

    def setup_optimizers(self) -> None:
        """The set-up module's optimizers and schedulers made anew by its ``configure_optimizers`` and set up on the
        Fabric; the training step steps them from its next call (``trainer.strategy.setup_optimizers(trainer)``).

        Example:
            ```python
            # what trainer.strategy.setup_optimizers(trainer) does
            trainer.run_context.setup_optimizers()
            ```
        """
        module, steps = self.module, self.steps
        if module is None or self.model is None:
            raise FabricxError(
                "setup_optimizers() needs the module a Trainer has set up: call trainer.strategy.setup_optimizers("
                "trainer) from a hook of a running fit (on_fit_start or later); the Trainer sets the optimizers "
                "up itself when fit starts."
            )
        optimizers, configs = self._configured_optimizers(module)
        self._use_optimizers(self._set_up_optimizers(optimizers), configs)
        assert steps is not None, "the Trainer gives its context the training steps when it builds it"
        steps.build()  # the schedulers stepped per step and per epoch, from the new configurations

    def _configured_optimizers(self, module: TrainModule) -> tuple[list[Any], list[SchedulerConfig]]:
        if "optimizer_idx" in inspect.signature(module.training_step).parameters:
            raise FabricxError(
                "Training with multiple optimizers is only supported with manual optimization. Remove the "
                "`optimizer_idx` argument from `training_step`, set `self.automatic_optimization = False` and "
                "access your optimizers in `training_step` with `opt1, opt2, ... = self.optimizers()`."
            )
        optimizers, configs = parse_optimizers(
            call_hook(module, "configure_optimizers", module.configure_optimizers),
            manual=not self.automatic,
            custom_scheduler_step=is_overridden("lr_scheduler_step", module),
        )
        if self.automatic and len(optimizers) > 1:
            raise FabricxError(
                "Training with multiple optimizers is only supported with manual optimization: "
                f"configure_optimizers returned {len(optimizers)} optimizers, but automatic optimization steps "
                "one. Set self.automatic_optimization = False in __init__ and step them in training_step "
                "(opt_a, opt_b = self.optimizers(); self.manual_backward(loss); opt_a.step())."
            )
        return optimizers, configs

    def _set_up_optimizers(self, optimizers: list[Any]) -> list[Any]:
        """Optimizers of the already set-up model, set up on the Fabric."""
        set_up = self.fabric.setup_optimizers(*optimizers)
        return list(set_up) if isinstance(set_up, tuple) else [set_up]

    def _use_optimizers(self, optimizers: list[Any], configs: list[SchedulerConfig]) -> None:
        """The optimizers and schedulers of this run, the strategy's too (Lightning's strategy holds them)."""
        self.optimizers, self.scheduler_configs = optimizers, configs
        steps = self.steps
        assert steps is not None, "the Trainer gives its context the training steps when it builds it"
        self.module_optimizers = [TrainerOptimizer(opt, steps, i) for i, opt in enumerate(optimizers)]
        strategy = self.fabric.strategy
        strategy.optimizers, strategy.lr_scheduler_configs = optimizers, configs

    def step_function(self, name: str) -> Any:
        """The set-up model's ``name`` step (``training_step``, ...), profiled when a profiler is given."""
        function = self._step_fns.get(name)
        if function is None:
            model, module = self.model, self.module
            assert model is not None and module is not None, "step functions exist once the module is set up"
            function = step_caller(model, module, name, self.fabric.strategy)
            function = self._step_fns[name] = profiled(self.profiler, f"[Strategy]{name}", function)
        return function

    def call_module_hook(self, name: str, *args: Any) -> Any:
        method = self.hooks.module_hook(name)
        return method(*args) if method is not None else None

    def call_datamodule_hook(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The DataModule's ``name`` method called (``None`` without a DataModule or such a method).

        Profiled as Lightning names it: ``[LightningDataModule]{class name}.{name}``.
        """
        datamodule = self.datamodule
        method = getattr(datamodule, name, None) if datamodule is not None else None
        if not callable(method):
            return None
        if not self.profiling:
            return method(*args, **kwargs)
        with self.profiler.profile(f"[LightningDataModule]{type(datamodule).__name__}.{name}"):
            return method(*args, **kwargs)

    def call_setup(self, stage: str) -> None:
        """The DataModule's and the hooks' ``setup(stage)``, then ``configure_model``."""
        self.call_datamodule_hook("setup", stage=stage)
        self.hooks.call("setup", stage=stage)
        self.call_module_hook("configure_model")

    def call_teardown(self, stage: str) -> None:
        self.call_datamodule_hook("teardown", stage=stage)
        self.hooks.call("teardown", stage=stage)

    def prepare_data(self) -> None:
        """``prepare_data`` on the first process of each node (or global zero), then a barrier."""
        fabric = self.fabric
        for owner in (self.datamodule, self.module):
            hook = getattr(owner, "prepare_data", None) if owner is not None else None
            if not callable(hook):
                continue
            per_node = getattr(owner, "prepare_data_per_node", True)
            if (fabric.local_rank == 0) if per_node else fabric.is_global_zero:
                if owner is self.datamodule:
                    self.call_datamodule_hook("prepare_data")
                else:
                    self.call_module_hook("prepare_data")  # profiled as the module's other hooks
        if fabric.world_size > 1:
            fabric.barrier()

    def report_profile(self) -> None:
        if self.profiling:
            self.profiler.describe()
            self.profiler.teardown()


__all__ = ["RunContext"]
