"""Saving a Trainer checkpoint (`Trainer.save_checkpoint`) and resuming a fit from one (`fit(ckpt_path=...)`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.train.checkpointing import (
    CallbackStates,
    DataModuleState,
    Extras,
    MetricStates,
    ProgressState,
    hook_view,
    is_legacy_folder,
    restore_datamodule,
    with_hook_changes,
)
from fabricx.train.data.loader_setup import drop_rest_of_epoch
from fabricx.train.data.loaders import warn_if_not_resumable
from fabricx.train.lightning_checkpoint import (
    HPARAMS_LEFT_OUT_KEY,
    HParamsState,
    ModuleWeights,
    checkpoint_state,
    restore_lightning_keys,
    warn_left_out_hparams,
)
from fabricx.utilities.exceptions import MisconfigurationException
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
        warn_left_out_hparams(trainer.lightning_module, state.get(HPARAMS_LEFT_OUT_KEY) or {}, filepath)
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
            if isinstance(state.get("state_dict"), Mapping):
                state["state_dict"] = ModuleWeights(trainer.model, state["state_dict"])
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


class RestoredModule:
    """What the first phase of a resume loaded into the module (see `restore_modules_and_callbacks`)."""

    def __init__(self, weights: dict[str, Any], cast: bool) -> None:
        self.weights = weights
        # Loaded into tensors of another dtype (a float64 checkpoint into a float32 module that the precision
        # makes float64 at setup): loaded again once set up, so that the values are exactly the saved ones.
        self.cast = cast


def restore_modules_and_callbacks(trainer: Trainer, path: str) -> RestoredModule | None:
    """The first phase of resuming a fit, before ``configure_optimizers`` (as Lightning restores): the module's
    ``on_load_checkpoint`` sees the checkpoint (it may change it), the module gets its weights, then the
    callbacks' ``on_load_checkpoint`` and ``load_state_dict`` run. `restore_fit` restores the rest later.

    Returns ``None`` (nothing done) for a strategy that stores shards or engine files itself (FSDP, tensor
    parallel, DeepSpeed: their weights load into the set-up model, as Lightning's strategies that restore after
    setup) and for a folder of an earlier fabricx Trainer: `restore_fit` then restores everything.

    Example:
        ```python
        restored = restore_modules_and_callbacks(trainer, "last.ckpt")  # before configure_optimizers
        ```
    """
    fabric = trainer.fabric
    module = trainer.lightning_module
    if module is None or is_legacy_folder(path) or fabric.strategy.checkpoint_storage() is not None:
        return None
    checkpoint = fabric.load(path)  # Lightning's entries as plain values (fabricx's own are restored later)
    hooks = trainer.run_context.hooks
    hook = hooks.module_hook("on_load_checkpoint")
    if hook is not None:
        hook(checkpoint)
    weights = checkpoint.get("state_dict")
    if not isinstance(weights, dict):
        raise KeyError(
            f"The checkpoint {path} has no 'state_dict' entry (the module's weights) to resume the fit from "
            f"(its entries: {sorted(checkpoint)[:10]}). Pass a checkpoint written by Trainer.save_checkpoint."
        )
    own = module.state_dict()
    cast = any(
        isinstance(value, Tensor) and key in own and own[key].dtype != value.dtype for key, value in weights.items()
    )
    module.load_state_dict(weights, strict=getattr(module, "strict_loading", True))
    restore_datamodule(trainer, checkpoint)
    for method in hooks.callback_hooks("on_load_checkpoint"):
        method(trainer, module, checkpoint)
    CallbackStates(trainer.callbacks).load_state_dict(checkpoint.get("callbacks") or {})
    return RestoredModule(weights if cast else {}, cast)


def reload_cast_weights(trainer: Trainer, restored: RestoredModule | None) -> None:
    """After setup: the weights `restore_modules_and_callbacks` cast to the module's old dtype, loaded exactly."""
    if restored is None or not restored.cast or trainer.model is None:
        return
    module = unwrap(trainer.model)
    strict = getattr(module, "strict_loading", True)
    trainer.fabric.strategy.load_module_state_dict(module, restored.weights, strict=strict)
    restored.weights = {}  # not held for the rest of the fit


def restore_fit(trainer: Trainer, path: str, modules_restored: bool = False) -> None:
    """Resume `trainer`'s fit from `path` (a Lightning-keyed file or folder, or an earlier fabricx folder): the
    optimizer, scheduler, loop, progress, data-position, metric and random states, and (unless
    `restore_modules_and_callbacks` restored them first, ``modules_restored``) the module and the callbacks."""
    extras = Extras()
    if is_legacy_folder(path):
        progress_state = ProgressState(trainer)
        trainer.fabric.load(path, _legacy_checkpoint_state(trainer, extras, progress_state))
        global_step, epoch = progress_state.counts
        trainer.fit_loop.count_from_checkpoint(global_step, epoch, trainer.progress.epoch_done)
    else:
        restored = ("state_dict", "callbacks") if modules_restored else ()
        extras.values = restore_lightning_keys(trainer, path, restored)
    for optimizer in trainer.optimizers:
        # Optimizer.load_state_dict rebinds param_groups/state on the user's optimizer; the wrapper
        # copied the old references at setup and must see the loaded ones.
        inner = unwrap(optimizer)
        for name in ("param_groups", "state", "defaults"):
            if name in optimizer.__dict__:
                optimizer.__dict__[name] = inner.__dict__[name]
    if not modules_restored:
        restore_datamodule(trainer, extras.values)
        hooks = trainer.run_context.hooks
        hook = hooks.module_hook("on_load_checkpoint")
        if hook is not None:
            hook(extras.values)
        for method in hooks.callback_hooks("on_load_checkpoint"):
            method(trainer, trainer.lightning_module, extras.values)
    _check_epochs_left(trainer)
    progress = trainer.progress
    loader = trainer.fit_loop.data.train_loader
    if progress.epoch_done:
        # Saved at the end of an epoch: continue with the next one.
        trainer.fit_loop.continue_after_epoch()
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


def _check_epochs_left(trainer: Trainer) -> None:
    """Refuse a checkpoint from beyond ``max_epochs``, with Lightning's exception and phrase."""
    max_epochs = trainer.max_epochs
    if max_epochs is not None and max_epochs != -1 and trainer.current_epoch > max_epochs:
        raise MisconfigurationException(
            f"You restored a checkpoint with current_epoch={trainer.current_epoch}, but you have set "
            f"Trainer(max_epochs={max_epochs}). Raise max_epochs above {trainer.current_epoch} to train on, or "
            "pass no ckpt_path to start afresh."
        )


def _legacy_checkpoint_state(trainer: Trainer, extras: Extras, progress: ProgressState) -> dict[str, Any]:
    """The entries of a checkpoint folder written by an earlier fabricx Trainer (before Lightning's keys)."""
    return {
        "module": trainer.model,
        "optimizers": {str(i): optimizer for i, optimizer in enumerate(trainer.optimizers)},
        "schedulers": {str(i): config.scheduler for i, config in enumerate(trainer.lr_scheduler_configs)},
        "train_loader": trainer.fit_loop.data.train_loader,
        "trainer": progress,
        "datamodule": DataModuleState(trainer),
        "hparams": HParamsState(trainer),
        "callbacks": CallbackStates(trainer.callbacks),
        "metrics": MetricStates(trainer.run_context),
        "extra": extras,
    }


__all__ = [
    "RestoredModule",
    "reload_cast_weights",
    "restore_fit",
    "restore_modules_and_callbacks",
    "save_trainer_checkpoint",
]
