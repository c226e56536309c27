# Lightning 2.6.5's test with its imports swapped by port.py (run it to regenerate this file).
# Copyright The Lightning AI team.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
from unittest.mock import Mock

import pytest
import torch
from helpers.boring_classes import BoringModel
from lightning_utilities.test.warning import no_warning_call

from fabricx.callbacks import EarlyStopping, ModelCheckpoint
from fabricx.train import Trainer
from fabricx.utilities.warnings import PossibleUserWarning


@pytest.mark.parametrize(("min_epochs", "min_steps", "val_count"), [(3, None, 3), (None, 3, 2)])
def test_should_stop_triggers_validation_once(min_epochs, min_steps, val_count, tmp_path):
    """Regression test for issue #15708.

    Test that the request for `should_stop=True` only triggers validation when Trainer is allowed to stop
    (min_epochs/steps is satisfied).

    """

    class NewBoring(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("loss", self.step(batch))
            return {"loss": self.step(batch)}

    model = NewBoring()
    # create a stopping condition with a high threshold so it triggers immediately
    # check the condition before validation so the count is unaffected
    stopping = EarlyStopping(monitor="loss", check_on_train_epoch_end=True, stopping_threshold=100)
    trainer = Trainer(
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
        limit_val_batches=2,
        limit_train_batches=2,
        max_epochs=3,
        min_epochs=min_epochs,
        min_steps=min_steps,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[stopping],
    )
    trainer.fit_loop.epoch_loop.val_loop.run = Mock()
    trainer.fit(model)
    assert trainer.fit_loop.epoch_loop.val_loop.run.call_count == val_count


def test_training_loop_dataloader_iter_multiple_dataloaders(tmp_path):
    trainer = Trainer(
        default_root_dir=tmp_path,
        limit_train_batches=3,
        limit_val_batches=0,
        max_epochs=1,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        devices=1,
    )

    class MyModel(BoringModel):
        batch_start_ins = []
        step_outs = []
        batch_end_ins = []

        def on_train_batch_start(self, batch, batch_idx, dataloader_idx=0):
            self.batch_start_ins.append((batch, batch_idx, dataloader_idx))

        def training_step(self, dataloader_iter):
            self.step_outs.append(next(dataloader_iter))

        def on_train_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
            self.batch_end_ins.append((batch, batch_idx, dataloader_idx))

    model = MyModel()
    trainer.fit(model, {"a": [0, 1], "b": [2, 3]})

    assert model.batch_start_ins == [(None, 0, 0)] + model.step_outs[:-1]
    assert model.step_outs == [({"a": 0, "b": 2}, 0, 0), ({"a": 1, "b": 3}, 1, 0)]
    assert model.batch_end_ins == model.step_outs


def test_no_batch_idx_gradient_accumulation():
    """Regression test for an issue where excluding the batch_idx from training_step would disable gradient
    accumulation."""

    class MyModel(BoringModel):
        last_batch_idx = -1

        def training_step(self, batch):  # no batch_idx
            return self.step(batch)

        def optimizer_step(self, epoch, batch_idx, *args, **kwargs):
            assert batch_idx in (1, 3)
            self.last_batch_idx = batch_idx
            return super().optimizer_step(epoch, batch_idx, *args, **kwargs)

    trainer = Trainer(fast_dev_run=4, accumulate_grad_batches=2, limit_val_batches=0)
    model = MyModel()
    trainer.fit(model)
    assert model.last_batch_idx == 3


def test_resume_mid_epoch_warning(tmp_path):
    """Test that resuming from a mid-epoch checkpoint raises a warning unless the dataloader is stateful."""

    class NotStatefulIterable:
        def __init__(self):
            self.index = 0

        def __iter__(self):
            for i in range(self.index, len(self)):
                yield torch.ones(2, 32) * i

        def __len__(self):
            return 3

    class StatefulIterable(NotStatefulIterable):
        def state_dict(self):
            return {"index": self.index}

        def load_state_dict(self, state_dict):
            self.index = state_dict["index"]

    trainer_kwargs = {
        "default_root_dir": tmp_path,
        "accelerator": "cpu",
        "max_epochs": 1,
        "enable_model_summary": False,
        "enable_progress_bar": False,
        "logger": False,
    }

    def train_and_resume(dataloader, resume_step, expected_warning):
        # Initial training
        checkpoint_dir = tmp_path / "checkpoints"
        trainer = Trainer(
            **trainer_kwargs,
            callbacks=ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=1, save_top_k=-1),
        )
        trainer.fit(BoringModel(), dataloader)

        # Resume
        trainer = Trainer(**trainer_kwargs, enable_checkpointing=False)
        resume_from = checkpoint_dir / f"epoch=0-step={resume_step}.ckpt"
        warn_assert = pytest.warns if expected_warning else no_warning_call
        with warn_assert(PossibleUserWarning, match="resuming from a checkpoint that ended before"):
            trainer.fit(BoringModel(), dataloader, ckpt_path=resume_from)

    # Resume mid-epoch, no stateful dataloader -> warning
    train_and_resume(dataloader=NotStatefulIterable(), resume_step=1, expected_warning=True)

    # Resume end-of-epoch, no stateful dataloader -> no warning
    train_and_resume(dataloader=NotStatefulIterable(), resume_step=3, expected_warning=False)

    # Resume mid-epoch, stateful dataloader -> no warning
    train_and_resume(dataloader=StatefulIterable(), resume_step=1, expected_warning=False)
