"""`LearningRateFinder`: the Tuner's learning-rate range test as a callback, run when `fit` starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabricx.train.callbacks.base import Callback
from fabricx.train.tuner.lr_finder import LRFinder

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class LearningRateFinder(Callback):
    """Search a learning rate when `fit` starts, then train with the suggestion (Lightning's callback).

    The search runs as `Tuner.lr_find` does (a throwaway Trainer on this fit's data; the weights and random
    state are put back afterwards); with ``update_attr`` the module's ``lr``/``learning_rate`` and the
    fit's optimizers take the suggestion. The results are in `optimal_lr`.

    Example:
        ```python
        finder = LearningRateFinder(num_training_steps=50)
        Trainer(callbacks=[finder]).fit(model, loader)
        finder.optimal_lr.suggestion()
        ```
    """

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"`mode` should be either of {self.SUPPORTED_MODES}, got {mode!r}.")
        # Tuner.lr_find's own arguments, handed on unchanged when fit starts.
        self._search = {
            "min_lr": min_lr,
            "max_lr": max_lr,
            "num_training": num_training_steps,
            "mode": mode,
            "early_stop_threshold": early_stop_threshold,
            "update_attr": update_attr,
            "attr_name": attr_name,
        }
        self.optimal_lr: LRFinder | None = None

    def lr_find(self, trainer: Trainer, pl_module: TrainModule) -> None:
        """Run the search on ``trainer``'s fit data and apply the suggestion (``update_attr``)."""
        from fabricx.train.tuner.tuning import Tuner

        data = trainer.fit_loop.data
        datamodule = trainer.datamodule
        train, val = (None, None) if datamodule is not None else (data.train_source, data.val_source)
        finder = Tuner(trainer).lr_find(
            pl_module, train_dataloaders=train, val_dataloaders=val, datamodule=datamodule, **self._search
        )
        self.optimal_lr = finder
        suggestion = finder.suggestion() if finder is not None and self._search["update_attr"] else None
        if suggestion is not None:  # the fit's optimizers exist already: they train with it too
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = suggestion

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.lr_find(trainer, pl_module)
