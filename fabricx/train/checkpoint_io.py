"""Saving a Trainer checkpoint (`Trainer.save_checkpoint`) and resuming a fit from one (`fit(ckpt_path=...)`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fabricx.train.checkpointing import (
    CallbackStates,
    DataModuleState,
    Extras,
    MetricStates,
    ProgressState,
    hook_view,
    is_legacy_folder,
    with_hook_changes,
)
from fabricx.train.lightning_checkpoint import HParamsState, checkpoint_state, restore_lightning_keys
from fabricx.train.loader_setup import drop_rest_of_epoch
from fabricx.train.loaders import warn_if_not_resumable
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def save_trainer_checkpoint(trainer: Trainer, filepath: str | os.PathLike, weights_only: bool, async_save: bool) -> Any:
    """`Trainer.save_checkpoint`: Lightning's entries through the ``on_save_checkpoint`` hooks into one save.

    Rank 0 claims the name until the save has committed (or failed): two jobs never write one file, and a job
    killed in between leaves the previous file as it was.
    """
    from fabricx.checkpoint.background import wait_for_pending_save
    from fabricx.checkpoint.manager import claim_path, reserve_on_rank_zero

    fabric, hooks = trainer.fabric, trainer.run_context.hooks
    wait_for_pending_save()  # one save at a time (as Fabric.save does): the last one's claim is released
    claim = reserve_on_rank_zero(fabric, lambda: claim_path(filepath))
    try:
        storage = fabric.strategy.checkpoint_storage()
        layout = "directory" if storage is not None and not storage.full_state_in_one_file else None
        state = checkpoint_state(trainer, weights_only)
        callback_hooks = () if weights_only else hooks.callback_hooks("on_save_checkpoint")
        module_hook = hooks.module_hook("on_save_checkpoint")
        if callback_hooks or module_hook is not None:
            # As Lightning: the hooks see the checkpoint itself (its light entries as plain values, the
            # weights too where one file holds them) and may change, add or remove entries.
            checkpoint = hook_view(state, with_weights=layout is None)
            for method in callback_hooks:
                method(trainer, trainer.lightning_module, checkpoint)
            if module_hook is not None:
                module_hook(checkpoint)
            state = with_hook_changes(state, checkpoint)
        handle = fabric.save(filepath, state, async_save=async_save, layout=layout)
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


def restore_fit(trainer: Trainer, path: str) -> None:
    """Resume `trainer`'s fit from `path` (a Lightning-keyed file or folder, or an earlier fabricx folder)."""
    extras = Extras()
    if is_legacy_folder(path):
        trainer.fabric.load(path, _legacy_checkpoint_state(trainer, extras))
    else:
        extras.values = restore_lightning_keys(trainer, path)
    for optimizer in trainer.optimizers:
        # Optimizer.load_state_dict rebinds param_groups/state on the user's optimizer; the wrapper
        # copied the old references at setup and must see the loaded ones.
        inner = unwrap(optimizer)
        for name in ("param_groups", "state", "defaults"):
            if name in optimizer.__dict__:
                optimizer.__dict__[name] = inner.__dict__[name]
    hooks = trainer.run_context.hooks
    hook = hooks.module_hook("on_load_checkpoint")
    if hook is not None:
        hook(extras.values)
    for method in hooks.callback_hooks("on_load_checkpoint"):
        method(trainer, trainer.lightning_module, extras.values)
    progress = trainer.progress
    loader = trainer.fit_loop.data.train_loader
    if progress.epoch_done:
        # Saved at the end of an epoch: continue with the next one.
        progress.current_epoch += 1
        progress.epoch_done = False
        state = loader.state_dict()
        if state["started"] and not state["finished"]:
            # The epoch was cut short (limit_train_batches, max_steps): drop the rest of it.
            drop_rest_of_epoch(loader)
        progress.resumed_mid_epoch = False
    else:
        # Inside an epoch (also one cut by max_steps/max_time, whose end hooks ran before the save).
        progress.epoch_cut = False
        progress.resumed_mid_epoch = bool(loader.state_dict()["started"])
        if progress.resumed_mid_epoch:
            warn_if_not_resumable(loader)


def _legacy_checkpoint_state(trainer: Trainer, extras: Extras) -> dict[str, Any]:
    """The entries of a checkpoint folder written by an earlier fabricx Trainer (before Lightning's keys)."""
    return {
        "module": trainer.model,
        "optimizers": {str(i): optimizer for i, optimizer in enumerate(trainer.optimizers)},
        "schedulers": {str(i): config.scheduler for i, config in enumerate(trainer.lr_scheduler_configs)},
        "train_loader": trainer.fit_loop.data.train_loader,
        "trainer": ProgressState(trainer),
        "datamodule": DataModuleState(trainer),
        "hparams": HParamsState(trainer),
        "callbacks": CallbackStates(trainer.callbacks),
        "metrics": MetricStates(trainer.run_context),
        "extra": extras,
    }


__all__ = ["restore_fit", "save_trainer_checkpoint"]
