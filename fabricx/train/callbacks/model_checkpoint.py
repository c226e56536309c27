"""``ModelCheckpoint``: keep the best k checkpoints by a monitored metric, and the last one."""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.manager import remove_checkpoint
from fabricx.train.callbacks.base import Callback
from fabricx.train.logging_result import to_float
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer

_FIELD = re.compile(r"\{([^{}:!]+)(?:[:!][^{}]*)?\}")


class ModelCheckpoint(Callback):
    """Save full training checkpoints (directories written by ``fabric.save``) during ``fit``.

    With ``monitor``, the ``save_top_k`` best checkpoints by that metric are kept (``mode`` says
    whether lower or higher is better; ``-1`` keeps all). Without it, ``save_top_k=1`` keeps the
    newest and ``-1`` keeps all. ``save_last`` also writes ``<dirpath>/last`` at every save, which
    ``fit(ckpt_path="last")`` resumes from. Checkpoints are written every ``every_n_train_steps``
    optimizer steps, or else every ``every_n_epochs`` epochs (at the end of the epoch, after
    validation), and after each mid-epoch validation. ``filename`` is a template such as
    ``"{epoch}-{val_loss:.3f}"`` (rendered as ``epoch=3-val_loss=0.123``).

    Example::

        checkpoint = ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=2, save_last=True)
        trainer = Trainer(callbacks=[checkpoint])
        trainer.fit(model, train_loader, val_loader)
        print(checkpoint.best_model_path, checkpoint.best_model_score)
    """

    CHECKPOINT_NAME_LAST = "last"
    _monitoring = True

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        mode: str = "min",
        save_top_k: int = 1,
        save_last: bool = False,
        every_n_train_steps: int | None = None,
        every_n_epochs: int | None = None,
        auto_insert_metric_name: bool = True,
        verbose: bool = False,
        async_save: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise MisconfigurationError(f"ModelCheckpoint(mode={mode!r}); allowed are 'min' and 'max'.")
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
            raise MisconfigurationError(f"ModelCheckpoint(save_top_k={save_top_k!r}); give an int >= -1.")
        if monitor is None and save_top_k not in (-1, 0, 1):
            raise MisconfigurationError(
                f"ModelCheckpoint(save_top_k={save_top_k}) without monitor cannot rank checkpoints. Set "
                "monitor='<metric>', or use save_top_k=1 (newest), -1 (all) or 0 (none)."
            )
        for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise MisconfigurationError(f"ModelCheckpoint({name}={value!r}); give an int >= 1 or None.")
        if every_n_train_steps is not None and every_n_epochs is not None:
            raise MisconfigurationError(
                "ModelCheckpoint takes every_n_train_steps or every_n_epochs, not both; choose one trigger."
            )
        self.dirpath = os.fspath(dirpath) if dirpath is not None else None
        self.filename = filename
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.every_n_train_steps = every_n_train_steps
        self.every_n_epochs = every_n_epochs if every_n_train_steps is None else None
        if self.every_n_epochs is None and every_n_train_steps is None:
            self.every_n_epochs = 1
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.async_save = async_save
        self._handle: Any = None
        self.best_k_models: dict[str, float | None] = {}
        self.best_model_path = ""
        self.best_model_score: float | None = None
        self.kth_best_model_path = ""
        self.kth_value: float | None = None
        self.last_model_path = ""
        self._validation_pending = False
        self._validation_ran = False

    @property
    def state_key(self) -> str:
        return self._state_key_with(
            monitor=self.monitor,
            mode=self.mode,
            every_n_train_steps=self.every_n_train_steps,
            every_n_epochs=self.every_n_epochs,
        )

    # -- hooks --------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self._validation_ran = False
        if self.dirpath is None:
            self.dirpath = os.path.join(trainer.default_root_dir, "checkpoints")
        # As Lightning warns: a new run's checkpoints would sit beside (and be ranked apart from) an older run's.
        if trainer.is_global_zero and stage == "fit" and self.save_top_k != 0 and _non_empty_dir(self.dirpath):
            rank_zero_warn(f"Checkpoint directory {self.dirpath} exists and is not empty.")

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        if trainer.state == "fit" and not trainer.sanity_checking:
            self._validation_ran = True
        if (
            trainer.state == "fit"
            and not trainer.sanity_checking
            and not trainer.is_last_batch
            and self.every_n_train_steps is None
        ):
            # A validation inside the epoch: save now (the checkpoint records that the batch's validation
            # is done), or after the optimizer step when it ran inside an accumulation window.
            if trainer.progress.accumulating:
                self._validation_pending = True
            else:
                self._save(trainer, "on_validation_end")

    def on_train_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        every = self.every_n_train_steps
        if every is not None:
            if trainer.progress.stepped and trainer.global_step % every == 0:
                self._save(trainer, "on_train_batch_end")
        elif self._validation_pending and trainer.progress.stepped:
            self._validation_pending = False
            self._save(trainer, "on_train_batch_end")

    def on_fit_end(self, trainer: Trainer, module: TrainModule) -> None:
        if self._handle is not None:  # fit returns with every checkpoint committed
            self._handle, handle = None, self._handle
            handle.wait()

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        if self.every_n_epochs is not None and (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            self._save(trainer, "on_train_epoch_end")

    # -- saving ---------------------------------------------------------------------------------------------
    def _save(self, trainer: Trainer, hook: str) -> None:
        assert self.dirpath is not None
        metrics = trainer.callback_metrics
        current: float | None = None
        if self.monitor is not None and self.monitor not in metrics and self._validation_may_still_log(trainer):
            pass  # e.g. max_steps ended the first epoch before any validation: keep only "last"
        elif self.monitor is not None:
            if self.monitor not in metrics:
                raise MisconfigurationError(
                    f"ModelCheckpoint(monitor={self.monitor!r}) found no metric {self.monitor!r} in {hook} "
                    f"(epoch {trainer.current_epoch}, step {trainer.global_step}). Logged metrics: "
                    f"{sorted(metrics) or 'none'}. Log it with self.log({self.monitor!r}, value) in "
                    "training_step or validation_step, or change monitor."
                )
            current = float(to_float(metrics[self.monitor]))
            if trainer.world_size > 1:
                current = trainer.fabric.broadcast(current)  # every process must take the same decision
        removed: list[str] = []
        if self.save_top_k != 0:
            filepath = self._new_path(trainer, metrics)
            if self.monitor is None:
                if self.save_top_k == 1:
                    removed = [p for p in self.best_k_models if p != filepath]
                    self.best_k_models = {}
                self.best_k_models[filepath] = None
                self.best_model_path = self.kth_best_model_path = filepath
                self._write(trainer, filepath)
            elif self._improves(current):
                self.best_k_models[filepath] = current
                if self.save_top_k != -1 and len(self.best_k_models) > self.save_top_k:
                    worst = self._worst()
                    del self.best_k_models[worst]
                    if worst != filepath:
                        removed.append(worst)
                self._update_best()
                if filepath in self.best_k_models:
                    self._write(trainer, filepath)
        if self.save_last:
            self.last_model_path = os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST)
            self._write(trainer, self.last_model_path)
        if removed and trainer.is_global_zero:
            doomed = [path for path in removed if path not in (self.last_model_path, *self.best_k_models)]
            io = trainer.fabric.strategy.checkpoint_io

            def remove() -> None:
                for path in doomed:
                    remove_checkpoint(path, io)

            # An asynchronous save deletes the checkpoints it replaces only once it is committed.
            if self._handle is not None:
                self._handle.add_commit_callback(remove)
            else:
                remove()

    def _validation_may_still_log(self, trainer: Trainer) -> bool:
        return not self._validation_ran and bool(getattr(trainer, "_val_loaders", None))

    def _improves(self, current: float | None) -> bool:
        if current is None or math.isnan(current):
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        kth = self.kth_value
        return kth is None or (current < kth if self.mode == "min" else current > kth)

    def _worst(self) -> str:
        scores = self.best_k_models
        pick = max if self.mode == "min" else min
        return pick(scores, key=lambda path: scores[path])  # type: ignore[arg-type,return-value]

    def _update_best(self) -> None:
        scores = self.best_k_models
        if not scores:
            return
        best = (min if self.mode == "min" else max)(scores, key=lambda path: scores[path])  # type: ignore[arg-type]
        self.best_model_path = best
        self.best_model_score = scores[best]
        if self.save_top_k == -1 or len(scores) >= self.save_top_k:
            self.kth_best_model_path = self._worst()
            self.kth_value = scores[self.kth_best_model_path]
        else:
            self.kth_best_model_path, self.kth_value = "", None

    def _write(self, trainer: Trainer, path: str) -> None:
        self._handle = trainer.save_checkpoint(path, async_save=self.async_save)
        if self.verbose and trainer.is_global_zero:
            trainer.print(f"ModelCheckpoint: saved {path}")

    def _new_path(self, trainer: Trainer, metrics: dict[str, Any]) -> str:
        assert self.dirpath is not None
        name = self.format_checkpoint_name(metrics, trainer.current_epoch, trainer.global_step)
        return os.path.join(self.dirpath, name)

    def format_checkpoint_name(self, metrics: dict[str, Any], epoch: int, step: int) -> str:
        """The checkpoint name from the ``filename`` template (default ``"epoch={epoch}-step={step}"``).

        Example::

            ModelCheckpoint(filename="{epoch}-{val_loss:.2f}").format_checkpoint_name({"val_loss": 0.5}, 3, 40)
            # 'epoch=3-val_loss=0.50'
        """
        template = self.filename or "{epoch}-{step}"
        values: dict[str, Any] = {"epoch": epoch, "step": step}
        for field in dict.fromkeys(_FIELD.findall(template)):
            if field not in values:
                values[field] = float(to_float(metrics[field])) if field in metrics else 0.0
            if self.auto_insert_metric_name:
                template = template.replace("{" + field, field + "={" + field)
        safe = {f"f{i}": value for i, value in enumerate(values.values())}
        for i, key in enumerate(values):
            template = re.sub(r"\{" + re.escape(key) + r"([:!}])", "{f" + str(i) + r"\1", template)
        return template.format(**safe).replace(os.sep, "_")

    # -- state ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor,
            "mode": self.mode,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "best_model_path": self.best_model_path,
            "best_model_score": self.best_model_score,
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "validation_pending": self._validation_pending,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("dirpath") != self.dirpath:
            # Another folder: the old ranking refers to files this callback does not manage.
            return
        self.best_k_models = dict(state_dict.get("best_k_models", {}))
        self.best_model_path = state_dict.get("best_model_path", "")
        self.best_model_score = state_dict.get("best_model_score")
        self.kth_best_model_path = state_dict.get("kth_best_model_path", "")
        self.kth_value = state_dict.get("kth_value")
        self.last_model_path = state_dict.get("last_model_path", "")
        self._validation_pending = bool(state_dict.get("validation_pending", False))


def _non_empty_dir(path: str) -> bool:
    try:
        if not os.path.isdir(path):
            return False
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError:
        return False
