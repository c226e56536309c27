"""The training epochs of ``Trainer.fit``: batches, accumulation, optimizer steps, validation checks.

Order inside one batch (the same on every process)::

    on_train_batch_start -> training_step -> on_before_backward -> backward -> on_after_backward
    [at an accumulation boundary: on_before_optimizer_step -> clip -> step -> zero_grad -> step schedulers]
    [every log_every_n_steps optimizer steps: step metrics to the loggers]
    [when due: validation]
    on_train_batch_end (callbacks, module, then monitoring callbacks such as ModelCheckpoint)

Validation runs before ``on_train_batch_end`` so that a checkpoint written there holds everything
that happened in the batch, and a resumed run continues exactly with the next one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.utilities.exceptions import MisconfigurationError

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def run_fit_loop(trainer: Trainer) -> None:
    """Train epochs until ``max_epochs``/``max_steps`` or ``trainer.should_stop``."""
    while not trainer._fit_is_done():
        run_train_epoch(trainer)
        finish_train_epoch(trainer)
        if trainer.should_stop:
            break


def run_train_epoch(trainer: Trainer) -> None:
    """One pass over the training data (or the rest of it, after a mid-epoch resume)."""
    fabric = trainer.fabric
    loader = trainer._train_loader
    hooks = trainer._hooks
    results = trainer._train_results
    trainer._results = results
    results.in_step = True
    results.hook = "training_step"
    if trainer._resume_mid_epoch:
        trainer._resume_mid_epoch = False
    else:
        loader.set_epoch(trainer.current_epoch)
        hooks.call("on_train_epoch_start")
    trainer._validated_this_epoch_end = False

    limit = trainer.num_training_batches
    limited = _is_limited(loader, limit)
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
    accumulate = fabric.grad_accum_steps > 1
    model = trainer._model
    log_every = trainer.log_every_n_steps
    has_loggers = bool(trainer.loggers)
    val_interval = trainer._val_check_batch
    max_steps = trainer.max_steps
    one_step = trainer._run_training_step
    new_batch = results.new_batch

    while True:
        if limited and loader.batches_consumed >= limit:
            break
        try:
            batch = next(iterator)
        except StopIteration:
            break
        batch_idx = loader.batches_consumed - 1
        new_batch(batch)
        for method in batch_start_callbacks:
            method(trainer, module, batch, batch_idx)
        if batch_start_module is not None and batch_start_module(batch, batch_idx) == -1:
            break
        done = batch_idx + 1
        trainer.is_last_batch = done >= limit
        if accumulate:
            with fabric.accumulate(model, epoch_length=epoch_length):
                outputs = one_step(batch, batch_idx)
                stepped = fabric.sync_gradients
                if stepped:
                    trainer._optimizer_step()
        else:
            outputs = one_step(batch, batch_idx)
            trainer._optimizer_step()
            stepped = True
        trainer._stepped = stepped
        if stepped and has_loggers and trainer.global_step % log_every == 0:
            trainer._log_step_metrics()
        if (
            val_interval
            and (done % val_interval == 0 or (trainer.is_last_batch and val_interval >= limit))
            and trainer._should_validate_this_epoch()
        ):
            trainer._run_validation_in_fit()
            if trainer.is_last_batch:
                trainer._validated_this_epoch_end = True
        for method in batch_end_callbacks:
            method(trainer, module, outputs, batch, batch_idx)
        if batch_end_module is not None:
            batch_end_module(outputs, batch, batch_idx)
        for method in batch_end_monitoring:
            method(trainer, module, outputs, batch, batch_idx)
        if trainer.should_stop or (max_steps >= 0 and trainer.global_step >= max_steps):
            break
    if (
        not trainer._validated_this_epoch_end
        and math.isinf(limit)
        and trainer._val_loaders
        and trainer._should_validate_this_epoch()
    ):
        # A loader without a length: the end of the epoch is only known now.
        trainer._run_validation_in_fit()


def finish_train_epoch(trainer: Trainer) -> None:
    """Epoch-end hooks, epoch metrics, epoch-interval schedulers, then monitoring callbacks."""
    hooks = trainer._hooks
    results = trainer._train_results
    results.in_step = False
    results.hook = "on_train_epoch_end"
    try:
        # Aggregates of what the steps logged are visible to every on_train_epoch_end hook; what the
        # hooks themselves log is reduced after them.
        trainer._finish_epoch_metrics(results)
        hooks.call("on_train_epoch_end", monitoring=False)
        trainer._finish_epoch_metrics(results)
    finally:
        results.in_step = True
        results.hook = "training_step"
    trainer._step_schedulers("epoch")
    trainer._epoch_done = True
    hooks.call("on_train_epoch_end", monitoring=True, module=False)
    trainer.current_epoch += 1
    trainer._epoch_done = False


def extract_loss(outputs: Any) -> Tensor:
    """The loss from what ``training_step`` returned (a tensor or a dict with ``"loss"``)."""
    if isinstance(outputs, Tensor):
        loss = outputs
    elif isinstance(outputs, dict) and "loss" in outputs:
        loss = outputs["loss"]
    else:
        what = (
            "None"
            if outputs is None
            else (f"a dict with keys {sorted(outputs)}" if isinstance(outputs, dict) else f"a {type(outputs).__name__}")
        )
        raise MisconfigurationError(
            f"training_step returned {what}; it must return the loss tensor, or a dict with the loss under "
            "'loss'. Add `return loss` at the end of training_step."
        )
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
    return loss


def _is_limited(loader: Any, limit: float) -> bool:
    try:
        return limit < len(loader)
    except TypeError:
        return not math.isinf(limit)
