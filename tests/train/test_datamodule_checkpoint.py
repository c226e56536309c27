"""A DataModule's state in a Trainer checkpoint: Lightning's key, restored before the loaders are requested.

Lightning's `test_dm_checkpoint_save_and_load` is left out of the conformance port (it calls a private
connector method); these cases check the same behaviour through the public API, and against Lightning's
own Trainer in both directions.
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx.train import DataModule, Trainer, TrainModule


def _data(fold: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(fold)
    x = torch.randn(16, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def _datamodule_class(base: type) -> type:
    class FoldData(base):  # type: ignore[misc, valid-type]
        """Which fold it serves is its state: a restored one must serve the saved fold."""

        def __init__(self) -> None:
            super().__init__()
            self.fold = 0
            self.folds_served: list[int] = []

        def train_dataloader(self) -> DataLoader:
            self.folds_served.append(self.fold)
            return DataLoader(_data(self.fold), batch_size=4)

        def state_dict(self) -> dict:
            return {"fold": self.fold}

        def load_state_dict(self, state_dict: dict) -> None:
            self.fold = state_dict["fold"]

    return FoldData


def _module_class(base: type) -> type:
    class Regression(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Regression


def _fit(kind: str, root, max_epochs: int, ckpt_path=None, fold: int = 0):
    if kind == "fabricx":
        trainer_class, module_base, data_base = Trainer, TrainModule, DataModule
    else:
        trainer_class, module_base, data_base = L.Trainer, L.LightningModule, L.LightningDataModule
    datamodule = _datamodule_class(data_base)()
    datamodule.fold = fold
    trainer = trainer_class(
        default_root_dir=root, max_epochs=max_epochs, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(_module_class(module_base)(), datamodule=datamodule, ckpt_path=ckpt_path)
    return trainer, datamodule


def test_the_state_is_under_lightnings_key_and_restored_before_the_loader_is_built(tmp_path) -> None:
    trainer, datamodule = _fit("fabricx", tmp_path, max_epochs=1, fold=3)
    path = tmp_path / "end.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint[type(datamodule).__qualname__] == {"fold": 3}

    _, resumed = _fit("fabricx", tmp_path, max_epochs=2, ckpt_path=path, fold=0)
    assert resumed.folds_served == [3]  # the loader of the resumed fit is the saved fold's


def test_lightning_and_fabricx_read_each_others_datamodule_state(tmp_path) -> None:
    lightning_trainer, _ = _fit("lightning", tmp_path / "lightning", max_epochs=1, fold=5)
    lightning_file = tmp_path / "lightning.ckpt"
    lightning_trainer.save_checkpoint(lightning_file)
    _, resumed = _fit("fabricx", tmp_path / "fabricx", max_epochs=2, ckpt_path=lightning_file)
    assert resumed.folds_served == [5]

    fabricx_trainer, _ = _fit("fabricx", tmp_path / "fabricx", max_epochs=1, fold=7)
    fabricx_file = tmp_path / "fabricx.ckpt"
    fabricx_trainer.save_checkpoint(fabricx_file)
    _, resumed_by_lightning = _fit("lightning", tmp_path / "lightning", max_epochs=2, ckpt_path=fabricx_file)
    assert resumed_by_lightning.folds_served == [7]
