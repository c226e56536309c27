"""``ModelCheckpoint``: Lightning's checkpoint callback, writing Lightning's ``.ckpt`` files.

Every checkpoint is ONE file named as Lightning names it (``epoch=0-step=5.ckpt``, ``last.ckpt``, ``-v1``
when the name exists), holding Lightning's top-level keys (see `fabricx.train.checkpoint.lightning_files`),
written atomically through the single-file checkpoint layout.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import time
import weakref
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fabricx.checkpoint.atomic import leftover_of
from fabricx.checkpoint.safe_read import inside
from fabricx.checkpoint.storage import is_url
from fabricx.train.callbacks.base import Checkpoint
from fabricx.train.logging.logging_result import to_float
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

# "{epoch}", "{val/loss:.2f}": the name of each field (up to a format spec, a conversion, or the end).
_FIELD = re.compile(r"\{([^{}:!]+)(?=[:!}])")


class ModelCheckpoint(Checkpoint):
    """Save checkpoints during ``fit``: the ``save_top_k`` best by ``monitor``, or the newest, and ``last.ckpt``.

    Lightning's options and names: ``dirpath`` (default ``<logger save_dir>/<name>/<version>/checkpoints``
    with a logger, else ``<default_root_dir>/checkpoints``; ``~`` expanded), ``filename`` templates
    (``"{epoch}-{val_loss:.2f}"`` gives ``epoch=3-val_loss=0.12.ckpt``), ``save_last`` (``True``, or
    ``"link"`` for a ``last.ckpt`` symlink to the newest checkpoint), ``every_n_train_steps``,
    ``train_time_interval``, ``every_n_epochs``, ``save_on_train_epoch_end``, ``save_on_exception``,
    ``save_weights_only``, ``enable_version_counter`` (``-v1``, ``-v2``, ... when a name exists). fabricx
    adds ``async_save=True`` (files written in the background).

    Example:

    ```python
    checkpoint = ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=2,
                                 save_last=True)
    trainer = Trainer(callbacks=[checkpoint])
    trainer.fit(model, train_loader, val_loader)
    # .../epoch=4-step=50.ckpt
    print(checkpoint.best_model_path, checkpoint.best_model_score)
    ```
    """

    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1
    _monitoring = True

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | str | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
        async_save: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise MisconfigurationError(f"`mode` can be min, max but got {mode} (ModelCheckpoint(mode=...)).")
        if save_last not in (None, True, False, "link"):
            raise MisconfigurationError(f"ModelCheckpoint(save_last={save_last!r}); allowed: True, False, 'link'.")
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
            raise MisconfigurationError(f"Invalid value for save_top_k={save_top_k}. Must be >= -1")
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise MisconfigurationError(
                f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration. No quantity "
                "for top_k to track: set monitor='<metric>', or use save_top_k=1 (newest), -1 (all) or 0 (none)."
            )
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs, every_n_train_steps = 1, 0
        for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise MisconfigurationError(f"Invalid value for {name}={value}. Must be >= 0")
        self._every_n_train_steps = every_n_train_steps or 0
        self._every_n_epochs = every_n_epochs or 0
        self._train_time_interval = train_time_interval
        triggers = (self._every_n_train_steps >= 1) + (self._every_n_epochs >= 1) + (train_time_interval is not None)
        if triggers > 1:
            raise MisconfigurationError(
                f"Combination of parameters every_n_train_steps={self._every_n_train_steps}, every_n_epochs="
                f"{self._every_n_epochs} and train_time_interval={train_time_interval} should be mutually exclusive."
            )
        expanded = None
        if dirpath:
            expanded = os.fspath(dirpath) if is_url(dirpath) else os.path.realpath(os.path.expanduser(dirpath))
        self.dirpath: str | None = expanded
        self.filename = filename
        self.monitor = monitor
        self.verbose = verbose
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_on_exception = save_on_exception
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        self.async_save = async_save
        self._handle: Any = None
        # Scores are tensors, as Lightning's are (code reads `best_model_score.item()`); ranked by their values.
        self.current_score: torch.Tensor | None = None
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.kth_best_model_path = ""
        self.kth_value: torch.Tensor = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.last_model_path = ""
        self._last_global_step_saved = 0  # no checkpoint before a step was taken
        self._last_checkpoint_saved = ""
        self._last_time_checked: float | None = None
        self._defer_save_until_validation = False
        self._validation_pending = False
        self._validation_has_run = False
        self._hook = "on_train_batch_end"
        # The Trainer's default callback (enable_checkpointing) writes last.ckpt at every epoch end, so that
        # fit(ckpt_path="last") always has one; Lightning's writes "last" only next to a saved checkpoint.
        self._last_at_every_trigger = False

    @property
    def state_key(self) -> str:
        return self._state_key_with(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs,
            train_time_interval=self._train_time_interval,
        )

    @property
    def every_n_train_steps(self) -> int:
        return self._every_n_train_steps

    @property
    def every_n_epochs(self) -> int:
        return self._every_n_epochs

    @property
    def train_time_interval(self) -> timedelta | None:
        return self._train_time_interval

    # -- hooks --------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        dirpath = self._resolve_dirpath(trainer)
        if trainer.world_size > 1:
            dirpath = trainer.fabric.broadcast(dirpath)
        self.dirpath = dirpath
        if self.save_last == "link" and is_url(dirpath):
            raise ValueError(
                f"`ModelCheckpoint(save_last='link')` is only supported for local file paths, got `dirpath={dirpath}`."
            )
        if trainer.is_global_zero and stage == "fit" and self.save_top_k != 0 and _not_empty(dirpath):
            rank_zero_warn(f"Checkpoint directory {dirpath} exists and is not empty.")

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._last_time_checked = time.monotonic()
        self._validation_has_run = False

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._hook = "on_train_batch_end"
        if self._validation_pending and trainer.progress.stepped:
            # A validation inside an accumulation window: saved after the window's optimizer step.
            self._validation_pending = False
            self._save_after_validation(trainer)
            return
        skip_batch = (
            self._every_n_train_steps < 1
            or not trainer.progress.stepped
            or trainer.global_step % self._every_n_train_steps != 0
        )
        skip_time = True
        now = time.monotonic()
        if self._train_time_interval is not None:
            previous = self._last_time_checked
            skip_time = previous is None or now - previous < self._train_time_interval.total_seconds()
            if trainer.world_size > 1:
                skip_time = trainer.fabric.broadcast(skip_time)
        if skip_batch and skip_time:
            return
        if not skip_time:
            self._last_time_checked = now
        candidates = self._monitor_candidates(trainer)
        if self.monitor is not None and self.monitor not in candidates:
            self._defer_save_until_validation = True  # a validation-only metric: save when it exists
            return
        if self._should_skip_saving_checkpoint(trainer):
            return
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._hook = "on_train_epoch_end"
        if self._should_skip_saving_checkpoint(trainer) or not self._should_save_on_train_epoch_end(trainer):
            return
        self._save_at_epoch_trigger(trainer, self._monitor_candidates(trainer))

    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._hook = "on_validation_end"
        if trainer.state == "fit" and not trainer.sanity_checking:
            self._validation_has_run = True
        if trainer.state != "fit" or trainer.sanity_checking or self._should_save_on_train_epoch_end(trainer):
            return
        if trainer.progress.accumulating and not trainer.is_last_batch:
            self._validation_pending = True  # the checkpoint then records the window's optimizer step
            return
        self._save_after_validation(trainer)

    def _save_after_validation(self, trainer: Trainer) -> None:
        if self._should_skip_saving_checkpoint(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        if self._defer_save_until_validation:
            self._defer_save_until_validation = False
            self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)
            return
        self._save_at_epoch_trigger(trainer, candidates)

    def _save_at_epoch_trigger(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        if self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0:
            self._save_topk_checkpoint(trainer, candidates)
        if self._last_is_due(trainer):
            self._save_last_checkpoint(trainer, candidates)

    def on_exception(self, trainer: Trainer, pl_module: TrainModule, exception: BaseException) -> None:
        if not self._should_save_on_exception(trainer):
            return
        candidates = self._monitor_candidates(trainer)
        filepath = self.format_checkpoint_name(metrics=candidates)
        self._save_checkpoint(trainer, filepath)
        self._save_last_checkpoint(trainer, candidates)
        rank_zero_info(
            f"An {type(exception).__name__} was raised with message: {exception}, saved checkpoint to {filepath}"
        )

    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self.save_last and not self._last_checkpoint_saved:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_fit_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self._handle is not None:  # fit returns with every checkpoint committed
            self._handle, handle = None, self._handle
            handle.wait()

    # -- decisions ------------------------------------------------------------------------------------------
    def _should_skip_saving_checkpoint(self, trainer: Trainer) -> bool:
        return (
            bool(getattr(trainer, "fast_dev_run", False))
            or trainer.state != "fit"
            or trainer.sanity_checking
            or self._last_global_step_saved == trainer.global_step
        )

    def _last_is_due(self, trainer: Trainer) -> bool:
        """At an epoch (or validation) trigger: ``last`` goes with a checkpoint saved at this step (or a link)."""
        return (
            self._last_global_step_saved == trainer.global_step
            or (self.save_last == "link" and bool(self._last_checkpoint_saved))
            or (self._last_at_every_trigger and self._last_global_step_saved != trainer.global_step)
        )

    def _should_save_on_exception(self, trainer: Trainer) -> bool:
        return (
            self.save_on_exception
            and not bool(getattr(trainer, "fast_dev_run", False))
            and not trainer.sanity_checking
            and self._last_global_step_saved != trainer.global_step
        )

    def _should_save_on_train_epoch_end(self, trainer: Trainer) -> bool:
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        if getattr(trainer, "check_val_every_n_epoch", 1) not in (1, None):
            return False
        val_batches = trainer.num_val_batches
        if not sum(val_batches if isinstance(val_batches, list) else [val_batches]):
            return True  # no validation: save at the end of the training epoch
        interval = getattr(trainer, "val_check_interval", 1.0)
        return interval is None or interval == 1.0

    def _monitor_candidates(self, trainer: Trainer) -> dict[str, Any]:
        candidates = dict(trainer.callback_metrics)
        epoch, step = candidates.get("epoch"), candidates.get("step")
        candidates["epoch"] = int(to_float(epoch)) if epoch is not None else trainer.current_epoch
        candidates["step"] = int(to_float(step)) if step is not None else trainer.global_step
        return candidates

    def check_monitor_top_k(self, trainer: Trainer, current: Any = None) -> bool:
        """Whether ``current`` earns a place among the ``save_top_k`` best (every process decides alike)."""
        if current is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        value = float(to_float(current))
        kth = float(self.best_k_models[self.kth_best_model_path])
        better = value < kth if self.mode == "min" else value > kth
        if trainer.world_size > 1:
            better = bool(trainer.fabric.broadcast(better))
        return better

    # -- saving ---------------------------------------------------------------------------------------------
    def _save_topk_checkpoint(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            self._save_none_monitor_checkpoint(trainer, candidates)
            return
        if self.monitor not in candidates:
            message = (
                f"`ModelCheckpoint(monitor={self.monitor!r})` could not find the monitored key in the returned "
                f"metrics: {list(candidates)} (in {self._hook}, epoch {trainer.current_epoch}, step "
                f"{trainer.global_step}). "
                f"HINT: Did you call `log({self.monitor!r}, value)` in the `LightningModule`?"
            )
            if self._validation_has_run:
                raise MisconfigurationError(message)
            rank_zero_warn(message)
        current = candidates.get(self.monitor)
        if self.check_monitor_top_k(trainer, current):
            self._update_best_and_save(current, trainer, candidates)
        elif self.verbose:
            rank_zero_info(
                f"Epoch {candidates['epoch']:d}, global step {candidates['step']:d}: {self.monitor!r} was not in "
                f"top {self.save_top_k}"
            )

    def _save_none_monitor_checkpoint(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        filepath = self._versioned_path(candidates, trainer, self.best_model_path)
        previous, self.best_model_path = self.best_model_path, filepath
        self._save_checkpoint(trainer, filepath)
        if self.save_top_k == 1 and previous and self._should_remove_checkpoint(trainer, previous, filepath):
            self._remove_checkpoint(trainer, previous)

    def _update_best_and_save(self, logged: Any, trainer: Trainer, candidates: dict[str, Any]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        replaced = None
        if len(self.best_k_models) == k and k > 0:
            replaced = self.kth_best_model_path
            self.best_k_models.pop(replaced)
        current = float(to_float(logged))
        # The logged tensor itself (it compares as its dtype does: 0.3 in float32 == 0.3); a NaN ranks last.
        if math.isnan(current):
            current = math.inf if self.mode == "min" else -math.inf
            score = torch.tensor(current)
        else:
            score = logged.detach().clone() if isinstance(logged, torch.Tensor) else torch.tensor(current)
        filepath = self._versioned_path(candidates, trainer, replaced)
        self.current_score = score
        self.best_k_models[filepath] = score
        scores = {path: float(value) for path, value in self.best_k_models.items()}
        if len(scores) == k:
            worst = max if self.mode == "min" else min
            self.kth_best_model_path = worst(scores, key=scores.__getitem__)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        best = min if self.mode == "min" else max
        self.best_model_path = best(scores, key=scores.__getitem__)
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose:
            rank_zero_info(
                f"Epoch {candidates['epoch']:d}, global step {candidates['step']:d}: {self.monitor!r} reached "
                f"{current:0.5f} (best {float(self.best_model_score):0.5f}), saving model to {filepath!r} as top {k}"
            )
        self._save_checkpoint(trainer, filepath)
        if replaced and self._should_remove_checkpoint(trainer, replaced, filepath):
            self._remove_checkpoint(trainer, replaced)

    def _save_last_checkpoint(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        if not self.save_last:
            return
        if sum(isinstance(callback, ModelCheckpoint) for callback in trainer.checkpoint_callbacks) > 1:
            # Written once every checkpoint callback of this hook has saved: the `last` a resume reads then holds
            # their states after this step. Written at once, it would miss a top-k file another callback saves next
            # (Lightning's does): the resumed run keeps other files than the run left alone, and never deletes that one.
            trainer.checkpoint_connector.after_this_hook(partial(self._write_last, trainer, candidates))
            return
        self._write_last(trainer, candidates)

    def _write_last(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        filepath = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST)
        if self._enable_version_counter:
            version = self.STARTING_VERSION
            while self.file_exists(filepath, trainer) and filepath != self.last_model_path:
                filepath = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST, ver=version)
                version += 1
        previous, self.last_model_path = self.last_model_path, filepath
        if self._last_at_every_trigger and self.monitor is None and self.save_top_k == 0:
            # The Trainer's default keeps only last.ckpt; Lightning's default ModelCheckpoint() makes its newest
            # checkpoint its best, so ckpt_path="best" (and test() after fit) find this one.
            self.best_model_path = filepath
        if self.save_last == "link" and self._last_checkpoint_saved and self.save_top_k != 0:
            self._link_checkpoint(trainer, self._last_checkpoint_saved, filepath)
        else:
            self._save_checkpoint(trainer, filepath)
        if previous and self._should_remove_checkpoint(trainer, previous, filepath):
            self._remove_checkpoint(trainer, previous)

    def _save_checkpoint(self, trainer: Trainer, filepath: str) -> None:
        # Lightning's call, with fabricx's async_save only when asked (a replaced save_checkpoint takes two arguments).
        save = trainer.save_checkpoint
        if self.async_save:
            self._handle = save(filepath, self.save_weights_only, async_save=True)
        else:
            self._handle = save(filepath, self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if self.verbose and trainer.is_global_zero:
            trainer.print(f"ModelCheckpoint: saved {filepath}")
        if trainer.is_global_zero:
            # As Lightning: loggers get this callback (a weak proxy: a logger keeping it does not keep it alive) and
            # read the paths they want from it (`best_model_path`, `best_k_models`, ...).
            for logger in trainer.loggers:
                after = getattr(logger, "after_save_checkpoint", None)
                if callable(after):
                    after(weakref.proxy(self))

    def _link_checkpoint(self, trainer: Trainer, filepath: str, linkpath: str) -> None:
        if self._handle is not None:  # the link must point at a committed file
            self._handle, handle = None, self._handle
            handle.wait()
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            if os.path.islink(linkpath) or os.path.isfile(linkpath):
                os.remove(linkpath)
            elif os.path.isdir(linkpath):
                shutil.rmtree(linkpath)
            try:
                os.symlink(os.path.relpath(filepath, os.path.dirname(linkpath)), linkpath)
            except OSError:  # no symlinks here (Windows without the privilege): a copy
                shutil.copy(filepath, linkpath)
        if trainer.world_size > 1:
            trainer.fabric.barrier()

    def _should_remove_checkpoint(self, trainer: Trainer, previous: str, current: str) -> bool:
        """Not the file just written, not the one the run resumed from, and inside ``dirpath`` once ``..`` and
        links are resolved (a path read from a checkpoint must not make the run delete anything else)."""
        if previous == current:
            return False
        old = Path(previous).absolute()
        if trainer.ckpt_path is not None and old == Path(trainer.ckpt_path).absolute():
            return False
        assert self.dirpath is not None
        return inside(previous, self.dirpath)

    def _remove_checkpoint(self, trainer: Trainer, filepath: str) -> None:
        if filepath in (self.last_model_path, self.best_model_path, *self.best_k_models):
            return  # still referenced (a version counter reused the name)
        if not trainer.is_global_zero:
            return

        def remove() -> None:
            trainer.checkpoint_connector.remove(filepath)

        # An asynchronous save deletes the checkpoints it replaces only once it is committed.
        if self._handle is not None and not self._handle.done():
            self._handle.add_commit_callback(remove)
        else:
            remove()

    # -- names ----------------------------------------------------------------------------------------------
    def _resolve_dirpath(self, trainer: Trainer) -> str:
        """``dirpath`` if given; else ``<save_dir>/<name>/<version>/checkpoints`` of the first logger; else
        ``<default_root_dir>/checkpoints``."""
        if self.dirpath is not None:
            return self.dirpath
        if trainer.loggers:
            logger = trainer.loggers[0]
            # Lightning's loggers name it save_dir, Fabric-style ones root_dir
            save_dir = getattr(logger, "save_dir", None) or getattr(logger, "root_dir", None)
            save_dir = save_dir or trainer.default_root_dir
            version = getattr(logger, "version", None)
            version = version if isinstance(version, str) else f"version_{version}"
            return os.path.join(save_dir, str(getattr(logger, "name", None)), version, "checkpoints")
        return os.path.join(trainer.default_root_dir, "checkpoints")

    def file_exists(self, filepath: str | os.PathLike, trainer: Trainer) -> bool:
        """Whether ``filepath`` exists on global rank zero (every process gets the same answer)."""
        exists = os.path.lexists(filepath) if trainer.is_global_zero else False
        return bool(trainer.fabric.broadcast(exists)) if trainer.world_size > 1 else exists

    def _versioned_path(self, candidates: dict[str, Any], trainer: Trainer, replaced: str | None = None) -> str:
        filepath = self.format_checkpoint_name(candidates)
        if self._enable_version_counter:
            version = self.STARTING_VERSION
            while self.file_exists(filepath, trainer) and filepath != replaced:
                filepath = self.format_checkpoint_name(candidates, ver=version)
                version += 1
        return filepath

    def _format_name(self, filename: str | None, metrics: dict[str, Any], prefix: str | None = None) -> str:
        template = filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}"
        fields = sorted(set(_FIELD.findall(template)), key=len, reverse=True)
        values: dict[str, Any] = {}
        for index, name in enumerate(fields):
            value = metrics.get(name, 0)
            values[f"f{index}"] = value.item() if hasattr(value, "item") else value
            field = (name + self.CHECKPOINT_EQUALS_CHAR if self.auto_insert_metric_name else "") + "{f" + str(index)
            template = re.sub(r"\{" + re.escape(name) + r"(?=[:!}])", lambda _, field=field: field, template)
        name = template.format(**values)
        return self.CHECKPOINT_JOIN_CHAR.join([prefix, name]) if prefix is not None else name

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None, prefix: str | None = None
    ) -> str:
        """The checkpoint path for ``metrics`` from the ``filename`` template (default ``"{epoch}-{step}"``).

        Example:

        ```python
        checkpoint = ModelCheckpoint(filename="{epoch}-{val_loss:.2f}")
        checkpoint.format_checkpoint_name({"epoch": 2, "val_loss": 0.1234})
        # 'epoch=2-val_loss=0.12.ckpt'
        ```
        """
        name = self._format_name(filename or self.filename, metrics, prefix)
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((name, f"v{ver}"))
        name = f"{name}{self.FILE_EXTENSION}"
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def to_yaml(self, filepath: str | os.PathLike | None = None) -> None:
        """Write ``best_k_models`` (checkpoint path: score) as YAML, by default to ``<dirpath>/best_k_models.yaml``."""
        import yaml

        if filepath is None:
            assert self.dirpath
            filepath = os.path.join(self.dirpath, "best_k_models.yaml")
        best_k = {path: float(to_float(score)) for path, score in self.best_k_models.items()}
        with open(filepath, "w") as handle:
            yaml.dump(best_k, handle)

    # -- state ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "validation_pending": self._validation_pending,  # fabricx: a save due after an accumulation window
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved_dirpath = state_dict.get("dirpath", self.dirpath)
        if saved_dirpath == self.dirpath:
            score = state_dict.get("best_model_score")
            self.best_model_score = None if score is None else _score(score)
            self.kth_best_model_path = self._own_path(state_dict.get("kth_best_model_path", self.kth_best_model_path))
            self.kth_value = _score(state_dict.get("kth_value", self.kth_value))
            best_k = state_dict.get("best_k_models", {})
            self.best_k_models = {k: _score(v) for k, v in best_k.items() if self._own_path(k)}
            self.last_model_path = self._own_path(state_dict.get("last_model_path", self.last_model_path))
            self._validation_pending = bool(state_dict.get("validation_pending", False))
        else:
            rank_zero_warn(
                f"The dirpath has changed from {saved_dirpath!r} to {self.dirpath!r}, therefore `best_model_score`, "
                "`kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` won't be reloaded. Only "
                "`best_model_path` will be reloaded."
            )
        self.best_model_path = state_dict.get("best_model_path", "")

    def _own_path(self, path: Any) -> str:
        """``path`` when it names a file inside ``dirpath``, else ``""`` with a warning: the run later replaces and
        deletes the files these paths name, so one read from a checkpoint must stay inside the run's folder."""
        if path in ("", None) or (isinstance(path, str) and self.dirpath is not None and inside(path, self.dirpath)):
            return path or ""
        rank_zero_warn(
            f"The checkpoint's ModelCheckpoint state names {path!r}, which is not a file inside dirpath "
            f"{self.dirpath!r}; it is ignored, and the run never replaces or deletes it."
        )
        return ""


def _not_empty(folder: str) -> bool:
    # What killed saves left is no checkpoint (the next save removes it).
    return os.path.isdir(folder) and any(leftover_of(name) is None for name in os.listdir(folder))


def _score(value: Any) -> torch.Tensor:
    """A saved score as the tensor ModelCheckpoint keeps (files of earlier fabricx versions hold floats)."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else torch.tensor(float(to_float(value)))
