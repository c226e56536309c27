"""One training step of the Trainer: the closure, backward and its hooks, the optimizer step, the schedulers.

Automatic optimization, at a window boundary:

```python
optimizer_step(epoch, batch_idx, optimizer, closure)   closure = training_step ->
    [first batch of a window: on_before_zero_grad -> optimizer_zero_grad] ->
    on_before_backward -> backward -> on_after_backward;
then on_before_optimizer_step -> configure_gradient_clipping -> the step
```

Inside a window the closure runs alone (no gradient sync). Manual optimization runs ``training_step``, in
which the module steps its optimizers (each `LightningOptimizer.step` comes back to `before_optimizer_step`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.train.loops.evaluation import takes_batch_idx
from fabricx.train.module.current_hook import call_hook
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.hooks import Hooks
    from fabricx.train.optim.optimizer_proxy import TrainerOptimizer
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer


class TrainingSteps:
    """The Trainer's step functions for the module of the current fit (built once per fit by `build`)."""

    def __init__(self, trainer: Trainer, run: RunContext) -> None:
        self.trainer = trainer
        self.run = run
        self.automatic_step: Callable[[Any, int, bool], dict[str, Any]] | None = None
        self.manual_step: Callable[[Any, int], dict[str, Any]] | None = None
        self.step_schedulers: list[Any] = []
        self.epoch_schedulers: list[Any] = []
        self._before_optimizer_step_hooks: tuple[Any, Any, Any] = ((), None, None)
        self._nothing_before_step = True  # no hooks before the optimizer step (clipping may still be on)
        # The backward's hooks, looked up once per run's hooks (`_backward_hooks_of` says whose they are).
        self._backward_hooks: tuple[Any, Any, Any, Any, Any] = ((), None, None, (), None)
        self._backward_hooks_of: Any = None

    def build(self) -> None:
        """Look the hooks up once and build the automatic (or manual) step of the module being fitted."""
        run, trainer = self.run, self.trainer
        module = run.module
        assert module is not None, "the steps are built after the module is set up"
        self.step_schedulers = [c for c in run.scheduler_configs if c.interval == "step"]
        self.epoch_schedulers = [c for c in run.scheduler_configs if c.interval == "epoch"]
        hooks = run.hooks
        training_step = run.step_function("training_step")
        with_batch_idx = takes_batch_idx(module.training_step)
        self._before_optimizer_step_hooks = (
            hooks.callback_hooks("on_before_optimizer_step"),
            hooks.module_hook("on_before_optimizer_step"),
            hooks.module_hook("configure_gradient_clipping"),
        )
        self._nothing_before_step = self._before_optimizer_step_hooks == ((), None, None)
        if not run.automatic:

            def manual_step(batch: Any, batch_idx: int) -> dict[str, Any]:
                outputs = training_step(batch, batch_idx) if with_batch_idx else training_step(batch)
                _, reported = training_output(outputs, False, 1)
                return reported

            self.manual_step = manual_step
            return

        fabric = run.fabric
        before_zero = hooks.callback_hooks("on_before_zero_grad")
        before_zero_module = hooks.module_hook("on_before_zero_grad")
        nothing_before_zero = not before_zero and before_zero_module is None
        zero_grad_hook = module.optimizer_zero_grad
        optimizer_step_hook = module.optimizer_step
        # Without backward hooks (or a profiler to time it), the backward is the Fabric's own.
        plain_backward = self._backward_hooks_for(hooks) == ((), None, None, (), None) and not run.profiling
        backward = run.fabric.backward if plain_backward else self.backward
        # `trainer.current_epoch` without its properties: the fit loop's epoch counter (reset in place).
        epoch_counts = trainer.fit_loop.epoch_progress.current
        counts = trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer
        step_counts, zero_grad_counts = counts.step, counts.zero_grad

        def automatic_step(batch: Any, batch_idx: int, boundary: bool) -> dict[str, Any]:
            reported: dict[str, Any] | None = None
            optimizer = run.module_optimizers[0]  # read each step: strategy.setup_optimizers may replace it
            scale = fabric.grad_accum_steps  # read each step: `GradientAccumulationScheduler` changes it by epoch

            def closure() -> Any:
                nonlocal reported
                outputs = training_step(batch, batch_idx) if with_batch_idx else training_step(batch)
                loss, found = training_output(outputs, True, scale)
                if reported is None:
                    reported = found
                else:  # an optimizer that evaluates the closure again (LBFGS)
                    reported.update(found)
                if loss is None:
                    return None
                run.last_loss = found["loss"]
                if batch_idx % scale == 0:
                    if nothing_before_zero:  # nothing can look in between: one call (this runs every step)
                        zero_grad_counts.increment_ready_and_started()
                    else:
                        zero_grad_counts.increment_ready()
                        for method in before_zero:
                            method(trainer, module, optimizer)
                        if before_zero_module is not None:
                            before_zero_module(optimizer)
                        zero_grad_counts.increment_started()
                    zero_grad_hook(epoch_counts.completed, batch_idx, optimizer)
                    zero_grad_counts.increment_completed()
                backward(loss)
                return found["loss"]

            if boundary:
                step_counts.increment_ready()
                optimizer_step_hook(epoch_counts.completed, batch_idx, optimizer, closure)
                step_counts.increment_completed()  # trainer.global_step counts it
            else:
                closure()
            return {} if reported is None else reported

        self.automatic_step = automatic_step

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """on_before_backward -> backward (the module's ``backward`` hook when overridden) -> on_after_backward."""
        run, trainer = self.run, self.trainer
        hooks, module = run.hooks, run.module
        before, before_module, custom, after, after_module = self._backward_hooks_for(hooks)
        for method in before:
            method(trainer, module, loss)
        if before_module is not None:
            before_module(loss)
        if custom is not None:
            custom(loss, *args, **kwargs)
        elif run.profiling:
            with run.profiler.profile("[Strategy]backward"):
                run.fabric.backward(loss, *args, **kwargs)
        else:
            run.fabric.backward(loss, *args, **kwargs)
        for method in after:
            method(trainer, module)
        if after_module is not None:
            after_module()

    def _backward_hooks_for(self, hooks: Hooks) -> tuple[Any, Any, Any, Any, Any]:
        """The callbacks' and module's hooks around backward, and the module's own ``backward`` (looked up once
        per run's `Hooks`)."""
        if self._backward_hooks_of is not hooks:
            self._backward_hooks = (
                hooks.callback_hooks("on_before_backward"),
                hooks.module_hook("on_before_backward"),
                hooks.module_hook("backward"),
                hooks.callback_hooks("on_after_backward"),
                hooks.module_hook("on_after_backward"),
            )
            self._backward_hooks_of = hooks
        return self._backward_hooks

    def before_optimizer_step(self, optimizer: TrainerOptimizer) -> None:
        """Called by ``LightningOptimizer.step`` after the closure: hooks, then (automatic) gradient clipping."""
        trainer = self.trainer
        if self._nothing_before_step and not trainer.gradient_clip_val:
            return  # no hooks, no clipping: the usual step
        before, before_module, clipping = self._before_optimizer_step_hooks
        module = self.run.module
        for method in before:
            method(trainer, module, optimizer)
        if before_module is not None:
            before_module(optimizer)
        if not self.run.automatic:
            return
        clip_val, algorithm = trainer.gradient_clip_val, trainer.gradient_clip_algorithm
        if clipping is not None:
            clipping(optimizer, gradient_clip_val=clip_val, gradient_clip_algorithm=algorithm)
        elif clip_val:
            assert module is not None
            module.clip_gradients(optimizer, gradient_clip_val=clip_val, gradient_clip_algorithm=algorithm)

    def manual_optimizer_step(self, step: Callable[[], Any]) -> Any:
        """A manual ``optimizer.step()``: counted as Lightning counts it, and as one optimizer step; returns what
        `step` returned."""
        counts = self.trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
        counts.increment_ready()
        result = step()
        counts.increment_completed()  # trainer.global_step counts it
        return result

    @contextlib.contextmanager
    def toggled(self, optimizer: TrainerOptimizer, sync_grad: bool) -> Generator[None, None, None]:
        """Only `optimizer`'s parameters require grad inside; DDP's gradient sync skipped unless `sync_grad`."""
        run = self.run
        module, model = run.module, run.model
        assert module is not None and model is not None, "the Trainer's optimizers exist once the module is set up"
        module.toggle_optimizer(optimizer)
        try:
            if sync_grad:
                yield
            else:
                with run.fabric.no_backward_sync(model):
                    yield
        finally:
            module.untoggle_optimizer(optimizer)

    def step_lr_schedulers(self, interval: str, plateau: bool | None = None) -> None:
        """Step the schedulers of ``interval`` due now (``plateau`` filters ReduceLROnPlateau ones)."""
        trainer = self.trainer
        # "step" frequencies count optimizer steps (Lightning counts batches, which differs under accumulation).
        counter = trainer.global_step if interval == "step" else trainer.current_epoch + 1
        module = self.run.module
        assert module is not None
        hook = module.lr_scheduler_step
        counts = trainer.fit_loop.epoch_loop.scheduler_progress
        for config in self.run.scheduler_configs:
            if config.interval != interval or counter % config.frequency != 0:
                continue
            if plateau is not None and config.reduce_on_plateau != plateau:
                continue
            metric = None
            if config.reduce_on_plateau:
                metrics = trainer.callback_metrics
                if config.monitor not in metrics:
                    if not config.strict:
                        rank_zero_warn(
                            f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available but "
                            "strict is set to `False`. Skipping learning rate update.",
                            category=RuntimeWarning,
                        )
                        continue
                    raise MisconfigurationError(
                        f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available. Available "
                        f"metrics are: {sorted(metrics)}. Condition can be set using `monitor` key in lr scheduler "
                        f"dict. The lr_scheduler from configure_optimizers monitors {config.monitor!r}, which was not "
                        f"logged before the {interval}-interval scheduler step. Logged metrics: "
                        f"{sorted(metrics)}. Log it with self.log({config.monitor!r}, ...) or change monitor."
                    )
                metric = metrics[config.monitor]
            counts.increment_ready()
            call_hook(module, "lr_scheduler_step", hook, config.scheduler, metric)
            counts.increment_completed()


def training_output(outputs: Any, automatic: bool, scale: int) -> tuple[Tensor | None, dict[str, Any]]:
    """The loss to back-propagate and what ``on_train_batch_end`` receives (Lightning's shapes)."""
    if automatic:
        if isinstance(outputs, Tensor):  # the usual return, answered first
            if not outputs.requires_grad:
                check_loss(outputs)  # raises
            return outputs, {"loss": outputs.detach() if scale == 1 else outputs.detach() / scale}
        if outputs is None:
            return None, {}
        if isinstance(outputs, Mapping) and "loss" in outputs:
            loss = outputs["loss"]
            extra = {k: v for k, v in outputs.items() if k != "loss"}
        else:
            what = (
                f"a dict with keys {sorted(outputs)}" if isinstance(outputs, Mapping) else f"a {type(outputs).__name__}"
            )
            lightning = (
                "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present"
                if isinstance(outputs, Mapping)
                else "In automatic optimization, `training_step` must return a Tensor, a dict, or None (where the "
                "step will be skipped)"
            )
            raise MisconfigurationError(
                f"{lightning}. training_step returned {what}; return the loss tensor, a dict with the loss under "
                "'loss', or None to skip the batch (add `return loss` at the end of training_step)."
            )
        check_loss(loss)
        reported = loss.detach() if scale == 1 else loss.detach() / scale
        return loss, {"loss": reported, **extra}
    if outputs is None:
        return None, {}
    if isinstance(outputs, Tensor):
        return None, {"loss": outputs.detach()}
    if isinstance(outputs, Mapping):
        extra = dict(outputs)
        if isinstance(extra.get("loss"), Tensor):
            extra["loss"] = extra["loss"].detach()
        return None, extra
    raise MisconfigurationError(
        "In manual optimization, `training_step` must either return a Tensor or have no return. training_step "
        f"returned a {type(outputs).__name__}: return a tensor, a dict, or nothing."
    )


def check_loss(loss: Any) -> None:
    if not isinstance(loss, Tensor):
        raise MisconfigurationError(
            f"training_step returned a loss of type {type(loss).__name__}; it must be a torch.Tensor."
        )
    if not loss.requires_grad:
        raise MisconfigurationError(
            "training_step returned a loss that does not require grad (computed under torch.no_grad(), "
            "detached, or from frozen parameters only), so there is nothing to train. Return the loss "
            "straight from the model's output."
        )


__all__ = ["TrainingSteps", "check_loss", "training_output"]
