"""Which checkpoint ``fit``/``validate``/``test``/``predict`` load for their ``ckpt_path`` argument.

Lightning's rules, with its warnings and errors:

* ``None`` with a module passed in: no checkpoint, the module as it is.
* ``None`` without a module (the one of the previous ``fit``): the best checkpoint of that fit, with a warning
  (when that fit saved none, fabricx keeps the fitted module's current weights).
* ``"best"``: the first ModelCheckpoint's ``best_model_path``; an error when there is no ModelCheckpoint
  or it saved no best (``monitor`` without ``save_top_k >= 1``). A ModelCheckpoint without ``monitor``
  has its newest checkpoint as its best, as in Lightning.
* ``"last"``: the newest ``last*.ckpt`` (see `find_last_checkpoint`); a warning,
  and no checkpoint, when there is none, so that it can be passed before the first run.
* a path: that checkpoint; ``FileNotFoundError`` when nothing is there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def _best_model_path(trainer: Trainer, fn: str) -> str:
    callbacks = trainer.checkpoint_callbacks
    if len(callbacks) > 1:
        rank_zero_warn(
            f'`.{fn}(ckpt_path="best")` is called with Trainer configured with multiple `ModelCheckpoint` callbacks. '
            "It will use the best checkpoint path from first checkpoint callback."
        )
    callback = trainer.checkpoint_callback
    if callback is None:
        raise MisconfigurationError(
            f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured. Add a '
            f"ModelCheckpoint(monitor=...) callback (or keep enable_checkpointing=True), or pass "
            f'`.{fn}(ckpt_path="last")` or a path.'
        )
    best = getattr(callback, "best_model_path", "")
    if not best:
        if trainer.fast_dev_run:
            raise MisconfigurationError(
                f'You cannot execute `.{fn}(ckpt_path="best")` with `fast_dev_run=True`: it saves no checkpoint. '
                f"Please pass an exact checkpoint path to `.{fn}(ckpt_path=...)`."
            )
        raise MisconfigurationError(
            f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model: '
            f"it saved none (give it monitor= with save_top_k >= 1, or no monitor). Pass "
            f'`.{fn}(ckpt_path="last")` or a path instead.'
        )
    return os.fspath(best)


def select_ckpt_path(
    trainer: Trainer, ckpt_path: str | os.PathLike | None, fn: str, model_provided: bool
) -> str | None:
    """The checkpoint ``trainer.<fn>(ckpt_path=...)`` loads, or ``None`` for none (rules in the module docstring).

    Example:
        ```python
        select_ckpt_path(trainer, "best", "test", model_provided=False)  # ".../epoch=3-step=40.ckpt"
        ```
    """
    if ckpt_path is None:
        if model_provided:
            return None
        callback = trainer.checkpoint_callback
        if not getattr(callback, "best_model_path", ""):
            return None  # fabricx: the fitted module's current weights (Lightning raises here)
        rank_zero_warn(
            f"`.{fn}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will be "
            f"used. You can pass `.{fn}(ckpt_path='best')` to use the best model or `.{fn}(ckpt_path='last')` to "
            "use the last model. If you pass a value, this warning will be silenced."
        )
        ckpt_path = "best"
    if ckpt_path == "best":
        return _best_model_path(trainer, fn)
    if ckpt_path == "last":
        found = find_last_checkpoint(trainer)
        if found is None:
            then = "training starts from scratch" if fn == "fit" else "the module's current weights are used"
            rank_zero_warn(
                f'.{fn}(ckpt_path="last") is set, but there is no last checkpoint available. No checkpoint will be '
                f"loaded: {fn}() found no last checkpoint in the ModelCheckpoint folders or "
                f"{os.path.join(trainer.default_root_dir, 'checkpoints')}, so {then}. HINT: Set "
                "`ModelCheckpoint(..., save_last=True)`."
            )
        return found
    if ckpt_path == "hpc":
        raise MisconfigurationError(
            'ckpt_path="hpc" (Lightning\'s SLURM auto-requeue file) is not supported; pass "last".'
        )
    path = os.fspath(ckpt_path)
    # Remote (fsspec) paths are checked when read, and so are a checkpoint I/O plugin's (it may store elsewhere).
    if "://" not in path and trainer.checkpoint_connector.file_io is None and not os.path.exists(path):
        raise FileNotFoundError(
            f"Checkpoint file not found: {path}. Pass {fn}(ckpt_path=...) an existing checkpoint file or folder, "
            '"best" or "last".'
        )
    return path


def find_last_checkpoint(trainer: Trainer) -> str | None:
    """The newest ``last`` checkpoint among the ModelCheckpoint callbacks' folders, or ``None``."""
    from fabricx.checkpoint.format import is_checkpoint
    from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint

    candidates: list[Path] = []
    folders = [cb.dirpath for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
    folders.append(os.path.join(trainer.default_root_dir, "checkpoints"))
    logger = trainer.loggers[0] if trainer.loggers else None
    if logger is not None and getattr(logger, "name", None) is not None:
        # Checkpoints of earlier runs sit in the logger's earlier versions: <save_dir>/<name>/version_*/checkpoints
        save_dir = getattr(logger, "save_dir", None) or getattr(logger, "root_dir", None) or trainer.default_root_dir
        root = os.path.join(save_dir, str(logger.name))
        folders += sorted(str(p) for p in Path(root).glob("*/checkpoints"))
    # last.ckpt, last-v1.ckpt, ... (and a fabricx checkpoint folder named "last", as earlier versions wrote)
    pattern = re.compile(rf"^{re.escape(ModelCheckpoint.CHECKPOINT_NAME_LAST)}(-v?\d+)?(\.ckpt)?$")
    # A file a checkpoint I/O plugin wrote is the plugin's format: as Lightning, its name is the only test.
    plugin = trainer.checkpoint_connector.file_io is not None
    for folder in dict.fromkeys(os.fspath(f) for f in folders):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found = [Path(folder, name) for name in names if pattern.match(name)]
        candidates += [path for path in found if plugin or is_checkpoint(path)]
    if not candidates:
        return None
    return os.fspath(max(candidates, key=lambda p: p.stat().st_mtime))  # a last.ckpt link: its target's time


__all__ = ["select_ckpt_path"]
