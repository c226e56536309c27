"""The Trainer's checkpoints are Lightning's ``.ckpt`` files, both ways (differential, against the installed Lightning).

* fabricx's Trainer writes ``epoch=1-step=6.ckpt`` and ``last.ckpt`` with Lightning's top-level keys;
  ``torch.load(weights_only=True)`` and Lightning's ``LightningModule.load_from_checkpoint`` read them.
* Lightning's Trainer writes the same run; fabricx resumes it with ``fit(ckpt_path=...)`` and ends where
  Lightning's own resumed run ends, and ``TrainModule.load_from_checkpoint`` reads it.
* Names as Lightning gives them: ``-v1`` when a name exists, ``~`` expanded, ``save_last="link"``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import fabricx.train as ft
from fabricx.callbacks import ModelCheckpoint

LIGHTNING_KEYS = {
    "epoch",
    "global_step",
    "pytorch-lightning_version",
    "state_dict",
    "loops",
    "callbacks",
    "optimizer_states",
    "lr_schedulers",
    "hparams_name",
    "hyper_parameters",
}


def _data() -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(torch.randn(12, 32, generator=torch.Generator().manual_seed(1)), batch_size=4)


class FxModel(ft.TrainModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = nn.Linear(32, 2)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_loss", self.layer(batch).pow(2).mean())

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)]


def _lightning_model() -> Any:
    import lightning.pytorch as pl

    class LitModel(pl.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.layer = nn.Linear(32, 2)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).pow(2).mean()

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            self.log("val_loss", self.layer(batch).pow(2).mean())

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)]

    return LitModel


_QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "num_sanity_val_steps": 0}


def _fx_trainer(root: Path, max_epochs: int, **kwargs: Any) -> ft.Trainer:
    return ft.Trainer(default_root_dir=root, max_epochs=max_epochs, accelerator="cpu", devices=1, **_QUIET, **kwargs)


def _lightning_trainer(root: Path, max_epochs: int, **kwargs: Any) -> Any:
    import lightning.pytorch as pl

    return pl.Trainer(default_root_dir=root, max_epochs=max_epochs, accelerator="cpu", devices=1, **_QUIET, **kwargs)


def test_fabricx_files_open_in_torch_and_lightning(tmp_path: Path) -> None:
    checkpoint = ModelCheckpoint(save_last=True)
    trainer = _fx_trainer(tmp_path, 2, callbacks=[checkpoint])
    torch.manual_seed(0)
    trainer.fit(FxModel(lr=0.2), _data(), _data())
    folder = tmp_path / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=1-step=6.ckpt", "last.ckpt"]
    assert all(p.is_file() for p in folder.iterdir())
    contents = torch.load(folder / "epoch=1-step=6.ckpt", weights_only=True)
    assert set(contents) >= LIGHTNING_KEYS
    assert (contents["epoch"], contents["global_step"], contents["hyper_parameters"]) == (1, 6, {"lr": 0.2})
    assert contents["loops"]["fit_loop"]["epoch_loop.state_dict"] == {"_batches_that_stepped": 6}
    assert contents["callbacks"][checkpoint.state_key]["best_model_path"] == str(folder / "epoch=1-step=6.ckpt")
    assert len(contents["optimizer_states"]) == 1 and contents["lr_schedulers"][0]["last_epoch"] == 2
    assert all(not key.startswith("__") or key.startswith("__fabricx_") for key in contents)

    module = trainer.lightning_module
    lit = _lightning_model().load_from_checkpoint(folder / "last.ckpt")
    assert lit.hparams.lr == 0.2
    assert all(torch.equal(a, b) for a, b in zip(lit.state_dict().values(), module.state_dict().values(), strict=True))
    again = FxModel.load_from_checkpoint(folder / "last.ckpt")
    assert torch.equal(again.layer.weight, module.layer.weight)


def test_lightning_files_resume_in_fabricx_as_in_lightning(tmp_path: Path) -> None:
    LitModel = _lightning_model()
    torch.manual_seed(0)
    from lightning.pytorch.callbacks import ModelCheckpoint as LightningCheckpoint

    lightning = _lightning_trainer(tmp_path / "pl", 2, callbacks=[LightningCheckpoint(save_last=True)])
    lightning.fit(LitModel(), _data(), _data())
    last = tmp_path / "pl" / "checkpoints" / "last.ckpt"

    continued = _lightning_trainer(tmp_path / "pl2", 4)
    lit = LitModel()
    continued.fit(lit, _data(), _data(), ckpt_path=last)

    trainer = _fx_trainer(tmp_path / "fx", 4)
    module = FxModel()
    trainer.fit(module, _data(), _data(), ckpt_path=last)
    assert (trainer.global_step, trainer.current_epoch) == (continued.global_step, continued.current_epoch) == (12, 4)
    for (name, a), b in zip(lit.state_dict().items(), module.state_dict().values(), strict=True):
        assert torch.equal(a, b), name  # optimizer momentum and scheduler were restored too
    loaded = FxModel.load_from_checkpoint(last)
    assert loaded.hparams.lr == 0.1 and torch.equal(loaded.layer.weight, lightning.lightning_module.layer.weight)


def test_weights_only_checkpoint_cannot_resume_the_optimizer(tmp_path: Path) -> None:
    trainer = _fx_trainer(tmp_path, 1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "w", save_weights_only=True)])
    trainer.fit(FxModel(), _data())
    [path] = list((tmp_path / "w").iterdir())
    assert "optimizer_states" not in torch.load(path, weights_only=True)
    with pytest.raises(KeyError, match="contains only the model"):
        _fx_trainer(tmp_path, 2).fit(FxModel(), _data(), ckpt_path=path)


def test_names_version_counter_home_and_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    # As Lightning's: a kept name that exists gets -v1 (without monitor the newest replaces the old one instead)
    checkpoint = ModelCheckpoint(dirpath="~/ck", filename="fixed", monitor="step", mode="max", save_top_k=-1)
    assert checkpoint.dirpath == str(tmp_path / "ck")
    _fx_trainer(tmp_path, 2, callbacks=[checkpoint]).fit(FxModel(), _data())
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["fixed-v1.ckpt", "fixed.ckpt"]

    linked = ModelCheckpoint(dirpath=tmp_path / "ln", save_last="link")
    _fx_trainer(tmp_path, 2, callbacks=[linked]).fit(FxModel(), _data())
    link = tmp_path / "ln" / "last.ckpt"
    assert link.is_symlink() and os.readlink(link) == "epoch=1-step=6.ckpt"
    assert torch.load(link, weights_only=True)["global_step"] == 6
    assert linked.last_model_path == str(link)


def test_a_save_that_dies_midway_leaves_the_previous_last_ckpt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True, save_top_k=0, every_n_train_steps=1)
    trainer = _fx_trainer(tmp_path, 1, callbacks=[checkpoint], max_steps=2)
    trainer.fit(FxModel(), _data())
    last = tmp_path / "ck" / "last.ckpt"
    before = last.read_bytes()

    real_save = torch.save

    def dies_midway(obj: Any, handle: Any, *args: Any, **kwargs: Any) -> None:
        real_save(obj, handle, *args, **kwargs)
        handle.truncate(100)  # half a file written, then the process "dies"
        raise SystemExit("killed while saving")

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(SystemExit):
        over = ModelCheckpoint(
            dirpath=tmp_path / "ck", save_last=True, save_top_k=0, every_n_train_steps=1, enable_version_counter=False
        )  # writes over last.ckpt itself
        _fx_trainer(tmp_path, 1, callbacks=[over]).fit(FxModel(), _data())
    monkeypatch.undo()
    assert last.read_bytes() == before  # the previous checkpoint, whole
    assert torch.load(last, weights_only=True)["global_step"] == 2
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["last.ckpt"]  # the temporary file went away


class HydraModel(FxModel):
    """nn-template's shape: a Hydra config node among the ``__init__`` arguments, all recorded."""

    def __init__(self, model: Any, lr: float = 0.1) -> None:
        ft.TrainModule.__init__(self)
        self.save_hyperparameters()
        self.layer = nn.Linear(32, 2)


def test_config_nodes_among_the_hyperparameters_are_stored_as_plain_values(tmp_path: Path) -> None:
    # A DictConfig is a Mapping: it passed the plain-value check whole, and the code-free writer then refused it,
    # failing the fit at ModelCheckpoint's first save. Now its values are stored (interpolations resolved) and a
    # missing value (`???`) leaves only that hyper-parameter out, with the usual warning.
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create({"width": 4, "depth": "${width}", "sizes": [1, 2], "todo": "???"})
    module = HydraModel(config.copy(), lr=0.05)
    assert module.hparams.model is not None and type(module.hparams.model).__name__ == "DictConfig"
    checkpoints = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = ft.Trainer(max_epochs=1, callbacks=[checkpoints], default_root_dir=tmp_path, **_QUIET)
    trainer.fit(module, _data())  # saves at the epoch's end
    del module.hparams.model["todo"]  # the one value a file cannot hold
    trainer.save_checkpoint(tmp_path / "complete.ckpt")
    saved = torch.load(tmp_path / "complete.ckpt", weights_only=True)
    assert saved["hparams_name"] == "kwargs"
    assert saved["hyper_parameters"] == {"model": {"width": 4, "depth": 4, "sizes": [1, 2]}, "lr": 0.05}
    loaded = HydraModel.load_from_checkpoint(tmp_path / "complete.ckpt")
    assert loaded.hparams.model == {"width": 4, "depth": 4, "sizes": [1, 2]} and loaded.hparams.lr == 0.05
    with_missing = torch.load(tmp_path / "last.ckpt", weights_only=True)  # saved while "todo" was missing
    assert with_missing["hyper_parameters"] == {"lr": 0.05}
    assert with_missing["__fabricx_hparams_left_out__"] == {"model": "DictConfig"}
