"""``DataModule``: the data side of a training run (download, split, loaders) in one object."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fabricx.train.module.hparams import HyperparametersMixin
from fabricx.train.module.module_hooks import DataHooks

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


class DataModule(HyperparametersMixin, DataHooks):
    """Data preparation and loaders for `fabricx.train.Trainer` (Lightning's ``LightningDataModule``).

    ``prepare_data`` runs once (global rank zero) before ``setup(stage)``, which runs in every process
    with ``stage`` one of ``"fit"``, ``"validate"``, ``"test"``, ``"predict"``. The trainer then asks
    for the ``*_dataloader`` it needs; ``teardown(stage)`` runs at the end. ``state_dict`` goes into
    checkpoints.

    Example:
        ```python
        class Digits(DataModule):
            def setup(self, stage):
                self.train, self.val = random_split(dataset, [0.9, 0.1])

            def train_dataloader(self):
                return DataLoader(self.train, batch_size=32, shuffle=True)

            def val_dataloader(self):
                return DataLoader(self.val, batch_size=64)

        Trainer(max_epochs=3).fit(model, datamodule=Digits())
        ```
    """

    #: Run ``prepare_data`` in the first process of every node instead of only global rank zero.
    prepare_data_per_node: bool = True
    #: A name for the data module (Lightning's attribute; fabricx does not read it).
    name: str | None = None
    #: Lightning's checkpoint keys of a data module's hyper-parameters.
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def __init__(self) -> None:
        self.trainer: Trainer | None = None

    def setup(self, stage: str) -> None:
        """Build datasets for ``stage`` (every process)."""

    def on_exception(self, exception: BaseException) -> None:
        """Called when fit/validate/test/predict ends with an exception (``KeyboardInterrupt`` included)."""

    def teardown(self, stage: str) -> None:
        """Clean up after ``stage``."""

    def state_dict(self) -> dict[str, Any]:
        """State to store in checkpoints."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned."""

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str | os.PathLike,
        map_location: Any = None,
        hparams_file: str | os.PathLike | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the data module from the hyper-parameters a Trainer checkpoint saved for it (``kwargs`` override
        them) and restore its `state_dict()` entry, as Lightning's ``LightningDataModule.load_from_checkpoint``.

        ``map_location`` and ``weights_only`` are accepted for Lightning's signature (a data module holds no weights;
        fabricx never runs code from a file).

        Example:
            ```python
            datamodule = Digits.load_from_checkpoint("checkpoints/last.ckpt", num_workers=0)
            ```
        """
        from fabricx.train.checkpoint.lightning_files import datamodule_from_checkpoint

        return datamodule_from_checkpoint(cls, checkpoint_path, hparams_file, kwargs)

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> DataModule:
        """A DataModule whose loaders are `DataLoader`s of the given datasets (or dicts/lists of datasets).

        Training loaders shuffle (not over an iterable dataset); `batch_size` and `num_workers` also go to
        `__init__` where it takes them, as in Lightning.

        Example:
            ```python
            dm = DataModule.from_datasets(train_set, val_set, batch_size=32)
            trainer.fit(model, datamodule=dm)
            ```
        """
        from fabricx.train.data.datamodule_datasets import init_arguments, loader_method

        datamodule = cls(**datamodule_kwargs, **init_arguments(cls, batch_size=batch_size, num_workers=num_workers))
        given = {"train": train_dataset, "val": val_dataset, "test": test_dataset, "predict": predict_dataset}
        for kind, datasets in given.items():
            if datasets is not None:
                method = loader_method(datasets, batch_size, num_workers, shuffle=kind == "train")
                setattr(datamodule, f"{kind}_dataloader", method)
        return datamodule

    def __str__(self) -> str:
        """The sizes of the datasets behind each loader method, as Lightning prints them.

        Example:
            ```python
            print(dm)  # {Train dataloader: size=64}\n{Validation dataloader: None}...
            ```
        """
        from fabricx.train.data.datamodule_datasets import describe_loaders

        return describe_loaders(self)


def defines(obj: Any, name: str, base: type) -> bool:
    """Whether ``obj``'s class overrides ``name`` of ``base`` (a loader method the user wrote)."""
    method = getattr(type(obj), name, None)
    return method is not None and method is not getattr(base, name, None)


__all__ = ["DataModule"]
