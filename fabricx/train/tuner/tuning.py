"""``Tuner``: find a learning rate (``lr_find``) and the largest batch size that fits (``scale_batch_size``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fabricx.train.tuner.attributes import lightning_getattr, lightning_hasattr, lightning_setattr
from fabricx.train.tuner.batch_size_scaling import BatchSizeSearch, dataset_length
from fabricx.train.tuner.lr_finder import LRFinder, LRSearch, determine_lr_attr_name
from fabricx.train.tuner.search import check_single_process, search_trainer, weights_restored
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

log = logging.getLogger(__name__)
_METHODS = ("fit", "validate", "test", "predict")


class Tuner:
    """Lightning's Tuner over a fabricx `fabricx.train.Trainer`.

    Each search runs short trials on a throwaway Trainer with the same accelerator, precision and
    accumulation as ``trainer``; ``trainer`` itself and the module's weights are left as they were.

    Example:

    ```python
    tuner = Tuner(trainer)
    tuner.scale_batch_size(model, mode="binsearch")  # sets model.batch_size
    # sets model.lr to finder.suggestion()
    finder = tuner.lr_find(model)
    trainer.fit(model)
    ```
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def scale_batch_size(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """The largest batch size (doubling; ``"binsearch"`` then bisects) that runs ``steps_per_trial`` steps.

        The batch size lives in ``batch_arg_name`` on the module, its ``hparams`` or the datamodule, and
        the loaders are rebuilt from ``train_dataloader()`` (etc.) for every trial, so loaders passed
        directly are refused. The result is set there too; ``binsearch`` takes ``margin`` off it.
        """
        _check_tuner_configuration(train_dataloaders, val_dataloaders, dataloaders, method)
        check_single_process(self._trainer, "Tuning the batch size")
        if mode not in ("power", "binsearch"):
            raise ValueError("`mode` should be either of `power` or `binsearch`")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"`margin` should be between 0 and 1. Found margin={margin}")
        if any(loaders is not None for loaders in (train_dataloaders, val_dataloaders, dataloaders)):
            raise MisconfigurationException(
                f"The Batch size finder cannot be used with dataloaders passed directly to `.{method}()`. Please"
                " disable the feature or incorporate the dataloader into your LightningModule or LightningDataModule."
            )
        if method != "fit":
            _refuse_several_loaders(model, datamodule, _prefix(method))
        if not lightning_hasattr(model, batch_arg_name, datamodule):
            raise MisconfigurationException(
                f"Field {batch_arg_name} not found in `model`, `datamodule`, nor their `hparams` attributes."
            )
        hparams = getattr(model, "hparams", None)
        if hasattr(model, batch_arg_name) and hparams is not None and batch_arg_name in hparams:
            rank_zero_warn(
                f"Field `model.{batch_arg_name}` and `model.hparams.{batch_arg_name}` are mutually"
                f" exclusive! `model.{batch_arg_name}` will be used as the initial batch size for scaling."
                " If this is not the intended behavior, please remove either one."
            )
        if self._trainer.fast_dev_run:
            rank_zero_warn("Skipping batch size scaler since `fast_dev_run` is enabled.")
            return None

        def trial() -> int | None:
            trainer = search_trainer(
                self._trainer,
                callbacks=[],
                max_steps=steps_per_trial,
                limit_train_batches=1.0,
                limit_val_batches=steps_per_trial,
                limit_test_batches=steps_per_trial,
                limit_predict_batches=steps_per_trial,
            )
            run = getattr(trainer, method)
            run(model, datamodule=datamodule)
            loader = trainer.train_dataloader if method == "fit" else getattr(trainer, f"{_prefix(method)}_dataloaders")
            return dataset_length(loader)

        search = BatchSizeSearch(
            trial,
            get=lambda: int(lightning_getattr(model, batch_arg_name, datamodule)),
            set_=lambda value: lightning_setattr(model, batch_arg_name, value, datamodule),
            max_trials=max_trials,
            max_val=max_val,
        )
        with weights_restored(model), self._attached_after(model, datamodule):
            new_size, _ = search.adjust(value=init_val)
            new_size = search.power(new_size) if mode == "power" else search.binsearch(new_size, margin)
        log.info(f"Finished batch size finder, will continue with full run using batch size {new_size}")
        return new_size

    def lr_find(
        self,
        model: TrainModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """Train ``num_training`` steps with the rate rising from ``min_lr`` to ``max_lr``; return the results.

        Stops early when the smoothed loss passes ``early_stop_threshold`` times its best. With
        ``update_attr`` the module's ``lr``/``learning_rate`` (or ``attr_name``) is set to the suggestion.
        """
        if method != "fit":
            raise MisconfigurationException("method='fit' is the only valid configuration to run lr finder.")
        _check_tuner_configuration(train_dataloaders, val_dataloaders, dataloaders, method)
        check_single_process(self._trainer, "The learning rate finder")
        if self._trainer.fast_dev_run:
            rank_zero_warn("Skipping learning rate finder since `fast_dev_run` is enabled.")
            return None
        if update_attr:
            attr_name = determine_lr_attr_name(model, attr_name)
        finder = LRFinder(mode, min_lr, max_lr, num_training)
        callback = LRSearch(finder, early_stop_threshold)
        trainer = search_trainer(self._trainer, callbacks=[callback], max_steps=num_training, limit_val_batches=0)
        with weights_restored(model, train_dataloaders, val_dataloaders), self._attached_after(model, datamodule):
            trainer.fit(model, train_dataloaders, val_dataloaders, datamodule=datamodule)
        if trainer.global_step != num_training:
            log.info(f"LR finder stopped early after {trainer.global_step} steps due to diverging loss.")
        finder.results = {"lr": callback.lrs, "loss": callback.losses}
        if update_attr:
            lr = finder.suggestion()
            if lr is not None:
                lightning_setattr(model, attr_name, lr)
                log.info(f"Learning rate set to {lr}")
        return finder

    @contextmanager
    def _attached_after(self, model: TrainModule, datamodule: Any) -> Iterator[None]:
        """The module (and datamodule) attached to this Tuner's Trainer after a search, as after Lightning's,
        which searches on that Trainer (the trials attach them to throwaway ones)."""
        try:
            yield
        finally:
            model.trainer = self._trainer
            if datamodule is not None and hasattr(datamodule, "trainer"):
                datamodule.trainer = self._trainer


def _refuse_several_loaders(model: Any, datamodule: Any, prefix: str) -> None:
    source = datamodule if datamodule is not None and hasattr(datamodule, f"{prefix}_dataloader") else model
    hook = getattr(source, f"{prefix}_dataloader", None)
    loaders = hook() if callable(hook) else None
    if isinstance(loaders, (list, tuple, dict)) and len(loaders) > 1:
        raise MisconfigurationException(
            f"The Batch size finder cannot be used with multiple {prefix} dataloaders"
            f" ({type(source).__name__}.{prefix}_dataloader() returned {len(loaders)}). Tune with one loader."
        )


def _prefix(method: str) -> str:
    return {"validate": "val", "test": "test", "predict": "predict"}[method]


def _check_tuner_configuration(train_dataloaders: Any, val_dataloaders: Any, dataloaders: Any, method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"method {method!r} is invalid. Should be one of {_METHODS}.")
    if method == "fit":
        if dataloaders is not None:
            raise MisconfigurationException(
                f"In tuner with method={method!r}, `dataloaders` argument should be None,"
                " please consider setting `train_dataloaders` and `val_dataloaders` instead."
            )
    elif train_dataloaders is not None or val_dataloaders is not None:
        raise MisconfigurationException(
            f"In tuner with `method`={method!r}, `train_dataloaders` and `val_dataloaders`"
            " arguments should be None, please consider setting `dataloaders` instead."
        )
