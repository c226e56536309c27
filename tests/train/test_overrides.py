"""``fabricx.train.is_overridden``: whether a TrainModule, DataModule or Callback replaces a base hook, the way a
hand-written trainer (Lightning's build-your-own-trainer example) asks it."""

from __future__ import annotations

import pytest
import torch

from fabricx import Fabric
from fabricx.callbacks import Callback
from fabricx.train import DataModule, TrainModule, is_overridden


class WithValidation(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).sum()

    def validation_step(self, batch, batch_idx):
        return self.layer(batch).sum()


class TrainOnly(TrainModule):
    def training_step(self, batch, batch_idx):
        return batch.sum()


def test_module_hooks_it_defines_are_overridden_and_inherited_ones_are_not():
    model = WithValidation()
    assert is_overridden("validation_step", model)
    assert is_overridden("training_step", model)
    assert not is_overridden("on_validation_model_eval", model)
    assert not is_overridden("validation_step", TrainOnly())
    assert not is_overridden("validation_step", None)


def test_a_module_set_up_by_fabric_is_judged_by_its_own_class():
    set_up = Fabric(accelerator="cpu").setup(WithValidation())
    assert is_overridden("validation_step", set_up)
    assert not is_overridden("on_validation_model_train", set_up)


def test_callbacks_data_modules_and_an_explicit_parent():
    class Printing(Callback):
        def on_train_epoch_end(self, trainer, module):
            pass

    class Data(DataModule):
        def train_dataloader(self):
            return []

    assert is_overridden("on_train_epoch_end", Printing())
    assert not is_overridden("on_train_epoch_start", Printing())
    assert is_overridden("train_dataloader", Data())
    assert is_overridden("forward", torch.nn.Linear(2, 2), parent=torch.nn.Module)


def test_unknown_bases_and_hooks_are_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="none of TrainModule, DataModule and Callback.*parent="):
        is_overridden("forward", torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="TrainModule has no method 'no_such_hook'"):
        is_overridden("no_such_hook", WithValidation())
