"""Structured training: subclass `TrainModule`, run it with `Trainer`.

Example:
    ```python
    from fabricx.train import Trainer, TrainModule
    ```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabricx.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from fabricx.train.data.combined_loader import CombinedLoader
    from fabricx.train.data.datamodule import DataModule
    from fabricx.train.data.loader_setup import has_len_all_ranks
    from fabricx.train.loops.progress import Progress
    from fabricx.train.module.hparams import AttributeDict, HyperparametersMixin, is_picklable
    from fabricx.train.module.hparams_files import (
        load_hparams_from_tags_csv,
        load_hparams_from_yaml,
        save_hparams_to_tags_csv,
        save_hparams_to_yaml,
    )
    from fabricx.train.module.module import TrainModule
    from fabricx.train.module.overrides import is_overridden
    from fabricx.train.optim.grad_clipping import GradClipAlgorithmType
    from fabricx.train.optim.optimizer_proxy import LightningOptimizer
    from fabricx.train.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
    from fabricx.train.trainer import Trainer
    from fabricx.train.tuner import Tuner

__all__ = [
    "AttributeDict",
    "CombinedLoader",
    "DataModule",
    "GradClipAlgorithmType",
    "HyperparametersMixin",
    "LightningOptimizer",
    "Progress",
    "RunningStage",
    "TrainModule",
    "Trainer",
    "TrainerFn",
    "TrainerState",
    "TrainerStatus",
    "Tuner",
    "has_len_all_ranks",
    "is_overridden",
    "is_picklable",
    "load_hparams_from_tags_csv",
    "load_hparams_from_yaml",
    "save_hparams_to_tags_csv",
    "save_hparams_to_yaml",
]

_WHERE = {
    "AttributeDict": "fabricx.train.module.hparams",
    "CombinedLoader": "fabricx.train.data.combined_loader",
    "DataModule": "fabricx.train.data.datamodule",
    "GradClipAlgorithmType": "fabricx.train.optim.grad_clipping",
    "HyperparametersMixin": "fabricx.train.module.hparams",
    "LightningOptimizer": "fabricx.train.optim.optimizer_proxy",
    "Progress": "fabricx.train.loops.progress",
    "RunningStage": "fabricx.train.states",
    "TrainerFn": "fabricx.train.states",
    "TrainerState": "fabricx.train.states",
    "TrainerStatus": "fabricx.train.states",
    "TrainModule": "fabricx.train.module.module",
    "Trainer": "fabricx.train.trainer",
    "Tuner": "fabricx.train.tuner",
    "has_len_all_ranks": "fabricx.train.data.loader_setup",
    "is_overridden": "fabricx.train.module.overrides",
    "is_picklable": "fabricx.train.module.hparams",
    "load_hparams_from_tags_csv": "fabricx.train.module.hparams_files",
    "load_hparams_from_yaml": "fabricx.train.module.hparams_files",
    "save_hparams_to_tags_csv": "fabricx.train.module.hparams_files",
    "save_hparams_to_yaml": "fabricx.train.module.hparams_files",
}


# Resolved on first use so that importing fabricx.train costs almost nothing.
__getattr__ = lazy_attributes(__name__, _WHERE)
