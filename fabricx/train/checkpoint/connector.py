"""The Trainer's checkpoint connector: what ``Trainer.save_checkpoint`` writes and how ``fit(ckpt_path=...)`` resumes.

Resuming follows Lightning's ``checkpoint_connector.py``: the path is selected (`select_ckpt_path`), then
`CheckpointConnector.resume_start` reads the checkpoint once on this rank (every later restore of it takes
that read: ``fabric.checkpointer.read_once``), `restore_modules_and_callbacks` restores what Lightning restores
before ``configure_optimizers``, `restore_training_state` the rest after setup, and `resume_end` drops the read.

Example:
    ```python
    connector = CheckpointConnector(trainer)
    connector.resume_start("last.ckpt")
    connector.restore_modules_and_callbacks()   # before configure_optimizers
    ...                                         # setup
    connector.restore_training_state()
    connector.resume_end()
    ```
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.checkpoint.contents import stores_engine_files
from fabricx.train.checkpoint.entries import (
    CallbackStates,
    DataModuleState,
    Extras,
    MetricStates,
    ProgressState,
    checkpoint_state,
    datamodule_key,
    hook_view,
    is_legacy_folder,
    progress_from_lightning,
    restore_datamodule,
    with_hook_changes,
)
from fabricx.train.checkpoint.lightning_files import (
    DATAMODULE_KEY,
    HPARAMS_ENTRY_KEYS,
    HPARAMS_LEFT_OUT_KEY,
    PROGRESS_KEY,
    HParamsState,
    ModuleWeights,
    warn_left_out_hparams,
)
from fabricx.train.data.loader_setup import drop_rest_of_epoch
from fabricx.train.data.loaders import warn_if_not_resumable
from fabricx.utilities.exceptions import MisconfigurationError, MisconfigurationException
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.capabilities import FileCheckpointIOLike
    from fabricx.checkpoint.layouts import Layout
    from fabricx.train.trainer import Trainer

__all__ = ["CheckpointConnector"]

#: Keys a Lightning-format file may lack (files written by other tools).
OPTIONAL_KEYS = ("loops", "callbacks", "lr_schedulers")


class CheckpointConnector:
    """Writes the Trainer's checkpoints and resumes a fit from one, reading it once per rank.

    Example:
        ```python
        state = trainer.checkpoint_connector.dump_checkpoint(weights_only=False)
        ```
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.path: str | None = None
        self._reading: contextlib.ExitStack | None = None
        # Weights the first phase loaded into tensors of another dtype (a float64 checkpoint into a float32
        # module that the precision makes float64 at setup): loaded again once set up, exactly as saved.
        self._cast_weights: dict[str, Any] | None = None
        self._modules_restored = False
        self._after_hook: list[Callable[[], None]] = []

    # -- saving --------------------------------------------------------------------------------------
    def after_this_hook(self, write: Callable[[], None]) -> None:
        """Run ``write`` once every callback of the hook being called has run (`run_after_hook_writes`).

        Example:
            ```python
            connector = trainer.checkpoint_connector
            connector.after_this_hook(functools.partial(trainer.save_checkpoint, "last.ckpt"))
            ```
        """
        self._after_hook.append(write)

    def run_after_hook_writes(self) -> None:
        """The writes `after_this_hook` kept, in their order; the hooks' callers run this after each hook."""
        if not self._after_hook:
            return
        writes, self._after_hook = self._after_hook, []
        for write in writes:
            write()

    @property
    def file_io(self) -> FileCheckpointIOLike | None:
        """The checkpoint I/O of Lightning's shape given in ``Trainer(plugins=...)``, if any."""
        return self.trainer.config.file_checkpoint_io

    def layout(self, storage_options: Any = None) -> str | Layout | None:
        """The layout a Trainer checkpoint takes: a folder where the strategy stores engines' own files, the
        plugin's file where ``plugins`` hold a checkpoint I/O of Lightning's shape (``storage_options`` go to
        its save), else what the path says."""
        engine_files = stores_engine_files(self.trainer.fabric.strategy)
        plugin = self.file_io
        if plugin is None:
            if storage_options is not None:
                raise MisconfigurationError(
                    f"save_checkpoint(storage_options={storage_options!r}): only a checkpoint I/O plugin of "
                    "Lightning's shape (Trainer(plugins=[...])) takes storage options; fabricx writes local files "
                    "and fsspec URLs without them. Drop the argument."
                )
            return "directory" if engine_files else None
        if engine_files:
            raise MisconfigurationError(
                f"Trainer(plugins=[{type(plugin).__name__}(...)]) writes one checkpoint file, but "
                f"{type(self.trainer.fabric.strategy).__name__} stores its engines' own files, which have no "
                "one-file form. Drop the plugin (the Trainer then writes a checkpoint folder), or use a strategy "
                "that holds the whole state in one file (ddp, fsdp)."
            )
        return self._plugin_layout(plugin, storage_options)

    @staticmethod
    def _plugin_layout(plugin: FileCheckpointIOLike, storage_options: Any = None) -> Layout:
        from fabricx.checkpoint.layouts.plugin_file import PluginFileLayout

        return PluginFileLayout(plugin, storage_options)

    def reading(self, path: str | os.PathLike) -> contextlib.AbstractContextManager[None]:
        """Inside the block every load of ``path`` takes one read of it, through the plugin that wrote it, if any.

        Example:
            ```python
            state = {"state_dict": trainer.model}
            with trainer.checkpoint_connector.reading("best.ckpt"):
                trainer.fabric.load("best.ckpt", state, strict=False)
            ```
        """
        plugin = self.file_io
        return self.trainer.fabric.checkpointer.read_once(path, None if plugin is None else self._plugin_layout(plugin))

    def teardown_io(self) -> None:
        """When a fit ends: the plugin's ``teardown()`` (an asynchronous one waits for its saves), as Lightning's
        strategy calls it."""
        teardown = getattr(self.file_io, "teardown", None)
        if callable(teardown):
            teardown()

    def remove(self, path: str | os.PathLike) -> None:
        """Rank 0: delete the checkpoint at ``path`` (through the plugin that wrote it, if any)."""
        from fabricx.checkpoint.manager import remove_checkpoint

        plugin = self.file_io
        if plugin is not None:
            plugin.remove_checkpoint(os.fspath(path))
        elif os.path.islink(path):
            os.remove(path)
        else:
            remove_checkpoint(path, self.trainer.fabric.strategy.checkpoint_io)

    def dump_checkpoint(self, weights_only: bool, filepath: str | os.PathLike = "") -> dict[str, Any]:
        """What ``Trainer.save_checkpoint`` writes: Lightning's entries after the ``on_save_checkpoint`` hooks.

        As Lightning: the hooks see the checkpoint itself (its light entries as plain values, the weights too
        where one file holds them) and may change, add or remove entries.

        Example:
            ```python
            fabric.checkpointer.save("last.ckpt", connector.dump_checkpoint(weights_only=False))
            ```
        """
        trainer = self.trainer
        hooks = trainer.run_context.hooks
        state = checkpoint_state(trainer, weights_only)
        warn_left_out_hparams(trainer.lightning_module, state.get(HPARAMS_LEFT_OUT_KEY) or {}, filepath)
        callback_hooks = () if weights_only else hooks.callback_hooks("on_save_checkpoint")
        module_hook = hooks.module_hook("on_save_checkpoint")
        if callback_hooks or module_hook is not None:
            checkpoint = hook_view(state, weights_from=trainer.fabric.strategy if self.layout() is None else None)
            for method in callback_hooks:
                method(trainer, trainer.lightning_module, checkpoint)
            if module_hook is not None:
                module_hook(checkpoint)
            state = with_hook_changes(state, checkpoint)
            if isinstance(state.get("state_dict"), Mapping):
                state["state_dict"] = ModuleWeights(trainer.model, state["state_dict"])
        return state

    # -- resuming ------------------------------------------------------------------------------------
    def resume_start(self, path: str | None) -> None:
        """Resume from ``path`` (``None``: nothing to resume): every restore below takes one read of it."""
        self.resume_end()
        self.path, self._cast_weights, self._modules_restored = path, None, False
        if path is not None:
            self._reading = contextlib.ExitStack()
            self._reading.enter_context(self.reading(path))

    @property
    def restoring(self) -> bool:
        """Between `resume_start` with a path and `resume_end`: the fit's state is not yet the checkpoint's whole."""
        return self._reading is not None

    def resume_end(self) -> None:
        """Drop the checkpoint read by `resume_start` (also after a failed resume)."""
        reading, self._reading = self._reading, None
        self._cast_weights = None
        if reading is not None:
            reading.close()

    def restore_modules_and_callbacks(self) -> None:
        """The first phase, before ``configure_optimizers`` (as Lightning restores): the module's
        ``on_load_checkpoint`` sees the checkpoint (it may change it), the module gets its weights, then the
        DataModule's state and the callbacks' ``on_load_checkpoint`` and ``load_state_dict`` run.

        Nothing is done for a strategy that stores shards or engine files itself (FSDP, tensor parallel,
        DeepSpeed: their weights load into the set-up model, as Lightning's strategies that restore after setup)
        and for a folder of an earlier fabricx Trainer: `restore_training_state` then restores everything.
        """
        trainer, path = self.trainer, self.path
        module = trainer.lightning_module
        fabric = trainer.fabric
        if path is None or module is None or is_legacy_folder(path) or fabric.strategy.checkpoint_storage():
            return
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
        self._cast_weights = weights if cast else None
        self._modules_restored = True

    def reload_cast_weights(self) -> None:
        """After setup: the weights the first phase cast to the module's old dtype, loaded exactly."""
        trainer, weights = self.trainer, self._cast_weights
        if weights is None or trainer.model is None:
            return
        module = unwrap(trainer.model)
        trainer.fabric.strategy.load_module_state_dict(module, weights, strict=getattr(module, "strict_loading", True))
        self._cast_weights = None  # not held for the rest of the fit

    def restore_training_state(self) -> None:
        """Resume the fit from the checkpoint (a Lightning-keyed file or folder, or an earlier fabricx folder):
        the optimizer, scheduler, loop, progress, data-position, metric and random states, and (unless the
        first phase restored them) the module and the callbacks."""
        trainer, path = self.trainer, self.path
        if path is None:
            return
        extras = Extras()
        if is_legacy_folder(path):
            progress_state = ProgressState(trainer)
            trainer.fabric.load(path, _legacy_checkpoint_state(trainer, extras, progress_state))
            global_step, epoch = progress_state.counts
            trainer.fit_loop.count_from_checkpoint(global_step, epoch, trainer.progress.epoch_done)
        else:
            extras.values = self._restore_lightning_keys(path)
        for optimizer in trainer.optimizers:
            # Optimizer.load_state_dict rebinds param_groups/state on the user's optimizer; the wrapper
            # copied the old references at setup and must see the loaded ones.
            inner = unwrap(optimizer)
            for name in ("param_groups", "state", "defaults"):
                if name in optimizer.__dict__:
                    optimizer.__dict__[name] = inner.__dict__[name]
        if not self._modules_restored:
            restore_datamodule(trainer, extras.values)
            hooks = trainer.run_context.hooks
            hook = hooks.module_hook("on_load_checkpoint")
            if hook is not None:
                hook(extras.values)
            for method in hooks.callback_hooks("on_load_checkpoint"):
                method(trainer, trainer.lightning_module, extras.values)
        _check_epochs_left(trainer)
        _continue_where_saved(trainer)

    def _restore_lightning_keys(self, path: str) -> dict[str, Any]:
        """Restore a checkpoint with Lightning's keys (fabricx's or Lightning's own file) into the trainer, but
        for what the first phase restored. Returns its other entries (what ``on_save_checkpoint`` added,
        ``epoch``, ``global_step``, ...) for the ``on_load_checkpoint`` hooks. A Lightning-written file has no
        fabricx progress entry: the progress then comes from its ``epoch``, ``global_step`` and ``loops``."""
        from fabricx.checkpoint.fabric_state import CheckpointKeyError

        trainer = self.trainer
        state = checkpoint_state(trainer)
        not_restored = ("pytorch-lightning_version", *HPARAMS_ENTRY_KEYS)
        restored = ("state_dict", "callbacks") if self._modules_restored else ()
        datamodule_entry = datamodule_key(trainer)  # None without a DataModule
        for key in (*not_restored, *restored, *((datamodule_entry,) if datamodule_entry is not None else ())):
            state.pop(key, None)  # they come back to the hooks as they are in the file
        if self._modules_restored:
            state["state_dict"] = ModuleWeights(trainer.model)
        state[DATAMODULE_KEY] = DataModuleState(trainer)  # where files of earlier fabricx versions hold it
        progress, loops = state[PROGRESS_KEY], state["loops"]
        try:
            remainder = trainer.fabric.load(path, state)
        except CheckpointKeyError as error:
            if "optimizer_states" in error.missing and trainer.optimizers:
                raise KeyError(
                    "Trying to restore optimizer state but checkpoint contains only the model. This is probably "
                    "due to `ModelCheckpoint.save_weights_only` being set to `True`."
                ) from error
            missing = [key for key in OPTIONAL_KEYS if key in error.missing]
            if not missing:
                raise
            state = {key: value for key, value in state.items() if key not in missing}
            remainder = trainer.fabric.load(path, state)  # the same read (resume_start), without those keys
        if not progress.loaded:
            progress_from_lightning(trainer, loops.loaded, int(state["epoch"]), int(state["global_step"]))
        elif loops.loaded is None:
            global_step, epoch = progress.counts
            trainer.fit_loop.count_from_checkpoint(global_step, epoch, trainer.progress.epoch_done)
        return {**remainder, "epoch": state["epoch"], "global_step": state["global_step"]}


def _continue_where_saved(trainer: Trainer) -> None:
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
        cut, progress.epoch_cut = progress.epoch_cut, False
        state = loader.state_dict()
        progress.resumed_mid_epoch = bool(state["started"])
        # A pass that handed out its last batch may not have been asked for one more (a group of loaders knows its
        # length), so it need not say it is finished.
        all_read = state["finished"] or loader.batches_consumed >= trainer.fit_loop.data.num_training_batches
        if progress.resumed_mid_epoch and progress.batch_finished and all_read:
            if trainer.fit_loop.in_epoch_end:
                # Written after the epoch's last batch, before the epoch was counted done (an exception in its end
                # hooks, or in the validation after a loader without a length ran out): its data is all read.
                trainer.fit_loop.continue_in_epoch_end()
            else:
                # Written after the epoch was counted done (`trainer.save_checkpoint` after `fit` returned): the
                # next epoch starts as any epoch does (its start hooks, `set_epoch`), the loader's next pass with it.
                progress.resumed_mid_epoch = False
        elif progress.resumed_mid_epoch:
            warn_if_not_resumable(loader)
            if cut:
                trainer.fit_loop.continue_cut_epoch()


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
        "hparams": HParamsState(trainer.lightning_module),
        "callbacks": CallbackStates(trainer.callbacks),
        "metrics": MetricStates(trainer.run_context),
        "extra": extras,
    }
