"""The training epochs of ``Trainer.fit``, in Lightning's order.

One batch:

```python
[on_before_batch_transfer -> transfer_batch_to_device -> on_after_batch_transfer]  (when overridden)
on_train_batch_start
automatic optimization, at a window boundary:
    optimizer_step(epoch, batch_idx, optimizer, closure)   closure = training_step ->
        [first batch of a window: on_before_zero_grad -> optimizer_zero_grad] ->
        on_before_backward -> backward -> on_after_backward;
    then on_before_optimizer_step -> configure_gradient_clipping -> the step
inside a window: the closure alone (no gradient sync)
manual optimization: training_step (the module steps its optimizers)
step-interval schedulers (and, at the epoch's last batch, epoch-interval ones)
on_train_batch_end (callbacks, module, then monitoring callbacks such as ModelCheckpoint)
step metrics to the loggers (every log_every_n_steps stepped batches)
[when due: on_validation_model_zero_grad -> validation]
ReduceLROnPlateau step schedulers; the stepped-batch counter moves on
```

A checkpoint written in ``on_train_batch_end`` records whether validation was still due; a run
resumed from it finishes that batch (validation included) before the next one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.utilities.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def run_fit_loop(trainer: Trainer) -> None:
    """Train epochs until ``max_epochs``/``max_steps``/``max_time`` or ``trainer.should_stop``."""
    progress = trainer.progress
    if progress.resumed_mid_epoch and progress.batch_idx >= 0 and not progress.batch_finished:
        # Restored from a checkpoint written in on_train_batch_end: finish that batch first, logging its
        # restored step values (inside the batch loop) as the interrupted run would have.
        connector = trainer._logger_connector
        connector.results = trainer._train_results
        connector.first_loop_iter = False
        finish_batch(trainer, progress.val_pending)
    while not trainer._fit_is_done():
        if trainer.should_stop and trainer._can_stop_early():
            break  # asked to stop before this epoch began (e.g. a Timer with no time left), as in Lightning
        trainer._maybe_reload_train_loader()
        run_train_epoch(trainer)
        finish_train_epoch(trainer)
        if trainer.should_stop and trainer._can_stop_early():
            break


def run_train_epoch(trainer: Trainer) -> None:
    """One pass over the training data (or the rest of it, after a mid-epoch resume)."""
    fabric = trainer.fabric
    loader = trainer._train_loader
    hooks = trainer._hooks
    results = trainer._train_results
    progress = trainer.progress
    trainer._results = results
    results.in_step = True
    results.hook = "training_step"
    resumed = progress.resumed_mid_epoch
    fit_loop = trainer.fit_loop
    epoch_loop = fit_loop.epoch_loop
    if resumed:
        progress.resumed_mid_epoch = False
    else:
        loader.set_epoch(trainer.current_epoch)
        progress.batch_idx = -1
        progress.validated_at_epoch_end = False
        fit_loop.reset()
        fit_loop.epoch_progress.increment_ready()
        hooks.call("on_train_epoch_start")
        fit_loop.epoch_progress.increment_started()
    epoch_loop.reset()
    fit_loop.restarting = False  # the restored counts are set; from here on they count this run
    counts = epoch_loop.batch_progress

    limit = trainer.num_training_batches
    limited = _is_limited(loader, limit)
    if resumed and limited and loader.batches_consumed >= limit:
        return
    iterator = iter(loader)
    # The last window of a limited epoch ends at the limit, not at the loader's end.
    epoch_length = int(limit) if limited else None

    # Everything the per-batch path touches, looked up once.
    batch_start_callbacks = hooks.callback_hooks("on_train_batch_start")
    batch_start_module = hooks.module_hook("on_train_batch_start")
    batch_end_callbacks = hooks.callback_hooks("on_train_batch_end", monitoring=False)
    batch_end_module = hooks.module_hook("on_train_batch_end")
    batch_end_monitoring = hooks.callback_hooks("on_train_batch_end", monitoring=True)
    module = trainer._module
    automatic = trainer._automatic
    accumulate = fabric.grad_accum_steps > 1
    model = trainer._model
    assert model is not None, "the fit loop runs on a set-up module"
    process = trainer._batch_processor
    step_schedulers = bool(trainer._step_schedulers_cache) and automatic
    epoch_schedulers = bool(trainer._epoch_schedulers_cache) and automatic
    automatic_step = trainer._automatic_step
    manual_step = trainer._manual_step
    connector = trainer._logger_connector

    while True:
        if limited and loader.batches_consumed >= limit:
            break
        try:
            batch = next(iterator)
        except StopIteration:
            break
        batch_idx = loader.batches_consumed - 1
        progress.batch_idx = batch_idx
        progress.total_batch_idx += 1
        progress.batch_finished = False
        progress.is_last_batch = batch_idx + 1 >= limit
        if process is not None:
            batch = process(batch, 0)
        counts.is_last_batch = progress.is_last_batch
        counts.increment_ready()
        connector.on_batch_start(results, batch)
        for method in batch_start_callbacks:
            method(trainer, module, batch, batch_idx)
        if batch_start_module is not None and batch_start_module(batch, batch_idx) == -1:
            counts.is_last_batch = True
            counts.increment_processed()
            progress.is_last_batch = True  # as Lightning: the epoch ends at this batch, its schedulers step
            if epoch_schedulers:
                trainer._step_schedulers("epoch", plateau=False)
            break
        counts.increment_started()
        if automatic:
            if accumulate:
                with fabric.accumulate(model, epoch_length=epoch_length):
                    stepped = fabric.sync_gradients
                    outputs = automatic_step(batch, batch_idx, stepped)
            else:
                stepped = True
                outputs = automatic_step(batch, batch_idx, True)
        else:
            steps_before = progress.global_step
            outputs = manual_step(batch, batch_idx)
            stepped = True
            progress.stepped = progress.global_step != steps_before
        if automatic:
            progress.stepped = stepped
        if stepped and step_schedulers:
            trainer._step_schedulers("step", plateau=False)
        if epoch_schedulers and progress.is_last_batch:
            trainer._step_schedulers("epoch", plateau=False)
        counts.increment_processed()
        progress.val_pending = _validation_due(trainer)
        progress.accumulating = not stepped
        for method in batch_end_callbacks:
            method(trainer, module, outputs, batch, batch_idx)
        if batch_end_module is not None:
            batch_end_module(outputs, batch, batch_idx)
        for method in batch_end_monitoring:
            method(trainer, module, outputs, batch, batch_idx)
        connector.on_batch_end()
        counts.increment_completed()
        finish_batch(trainer, progress.val_pending, accumulating=not stepped)
        if trainer._should_end_epoch():
            # Stopped by max_steps/max_time before the data ended: the epoch is cut, not finished.
            progress.epoch_cut = not trainer.should_stop and batch_idx + 1 < limit
            break
    if (
        not progress.validated_at_epoch_end
        and math.isinf(limit)
        and math.isinf(trainer._val_check_batch)
        and trainer.val_check_seconds is None
        and trainer._validation_enabled()
        and trainer._should_validate_this_epoch()
    ):
        # A loader without a length: the end of the epoch is only known now.
        trainer.fit_loop.epoch_loop.val_loop.run()
        progress.validated_at_epoch_end = True


def finish_batch(trainer: Trainer, validate: bool, accumulating: bool = False) -> None:
    """What follows ``on_train_batch_end``: step metrics, validation when due, plateau schedulers, counters."""
    progress = trainer.progress
    if not accumulating and trainer.loggers:
        every = trainer.log_every_n_steps
        due = every > 0 and (progress.batches_that_stepped + 1) % every == 0
        trainer._logger_connector.update_train_step_metrics(due or trainer.should_stop or bool(trainer.fast_dev_run))
    if validate:
        progress.val_pending = False
        if not accumulating:
            trainer._call_module_hook("on_validation_model_zero_grad")
        trainer.fit_loop.epoch_loop.val_loop.run()
        if progress.is_last_batch:
            progress.validated_at_epoch_end = True
    if not accumulating:
        if trainer._automatic and trainer._step_schedulers_cache:
            trainer._step_schedulers("step", plateau=True)
        progress.batches_that_stepped += 1
    progress.val_pending = False
    progress.batch_finished = True


def _validation_due(trainer: Trainer) -> bool:
    """Lightning's rule: in a validating epoch, when stopping, when the time interval passed, or every N batches
    (counted within the epoch, or over all epochs with ``check_val_every_n_epoch=None``)."""
    if not trainer._validation_enabled() or not trainer._should_validate_this_epoch():
        return False
    progress = trainer.progress
    if trainer.should_stop and trainer._can_stop_early():
        return True
    seconds = trainer.val_check_seconds
    if seconds is not None:
        return time.monotonic() - trainer._last_val_time >= seconds
    interval = trainer._val_check_batch
    if math.isinf(interval):
        # An epoch of unknown length: validated once its end is known (after the loop).
        return False
    done = (progress.total_batch_idx if trainer.check_val_every_n_epoch is None else progress.batch_idx) + 1
    return done % interval == 0


def finish_train_epoch(trainer: Trainer) -> None:
    """Epoch-end hooks, epoch metrics, epoch-interval plateau schedulers, then monitoring callbacks."""
    hooks = trainer._hooks
    results = trainer._train_results
    progress = trainer.progress
    # A checkpoint written in the epoch-end hooks of a cut epoch resumes inside it, with the aggregates
    # of the batches done so far (the epoch-end computation below resets them).
    trainer._cut_metric_state = results.state_dict() if progress.epoch_cut else None
    results.in_step = False
    results.hook = "on_train_epoch_end"
    connector = trainer._logger_connector
    connector.results = results
    # Outside the batch loop, reads of the metrics give the epoch aggregates (to every on_train_epoch_end hook).
    connector.epoch_end_reached()
    # As Lightning: `processed` before the epoch-end hooks (where checkpoints are written), `completed` after.
    trainer.fit_loop.epoch_progress.increment_processed()
    try:
        hooks.call("on_train_epoch_end", monitoring=False)
    finally:
        results.in_step = True
        results.hook = "training_step"
    if trainer._automatic and not progress.epoch_cut:
        if progress.batch_idx < 0 or not progress.is_last_batch:
            # The epoch ended early (no batches, on_train_batch_start returned -1, a batch limit):
            # its epoch schedulers were not stepped at a last batch.
            trainer._step_schedulers("epoch", plateau=False)
        trainer._step_schedulers("epoch", plateau=True)
    progress.epoch_done = not progress.epoch_cut
    results.in_step = False
    results.hook = "on_train_epoch_end"
    try:
        hooks.call("on_train_epoch_end", monitoring=True, module=False)
    finally:
        results.in_step = True
        results.hook = "training_step"
    connector.on_epoch_end()
    # As in Lightning, epoch metrics are logged at the step of the epoch's last batch.
    connector.update_train_epoch_metrics(step=max(0, progress.batches_that_stepped - 1))
    trainer.fit_loop.epoch_progress.increment_completed()
    progress.current_epoch += 1
    progress.epoch_done = False
    progress.epoch_cut = False
    trainer._cut_metric_state = None


def training_output(outputs: Any, automatic: bool, scale: int) -> tuple[Tensor | None, dict[str, Any]]:
    """The loss to back-propagate and what ``on_train_batch_end`` receives (Lightning's shapes)."""
    if automatic:
        if outputs is None:
            return None, {}
        if isinstance(outputs, Tensor):
            loss, extra = outputs, {}
        elif isinstance(outputs, Mapping) and "loss" in outputs:
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


def extract_loss(outputs: Any) -> Tensor:
    """The loss from what ``training_step`` returned (a tensor or a dict with ``"loss"``)."""
    loss, _ = training_output(outputs, True, 1)
    if loss is None:
        raise MisconfigurationError(
            "training_step returned None; it must return the loss tensor, or a dict with the loss under "
            "'loss'. Add `return loss` at the end of training_step."
        )
    return loss


def _is_limited(loader: Any, limit: float) -> bool:
    try:
        return limit < len(loader)
    except TypeError:
        return not math.isinf(limit)
