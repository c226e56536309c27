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

import pytest
import torch
from helpers.boring_classes import BoringModel, RandomDataset
from torch.utils.data import Sampler, SequentialSampler

from fabricx.train import Trainer


@pytest.mark.parametrize("overfit_batches", [1, 2, 0.1, 0.25, 1.0])
def test_overfit_basic(tmp_path, overfit_batches):
    """Tests that only training_step can be used when overfitting."""
    model = BoringModel()
    model.validation_step = None
    total_train_samples = len(BoringModel().train_dataloader())

    trainer = Trainer(
        default_root_dir=tmp_path, max_epochs=1, overfit_batches=overfit_batches, enable_model_summary=False
    )
    trainer.fit(model)

    assert trainer.num_val_batches == []
    assert trainer.num_training_batches == int(
        overfit_batches * (1 if isinstance(overfit_batches, int) else total_train_samples)
    )


def test_overfit_batches_raises_warning_in_case_of_sequential_sampler(tmp_path):
    class NonSequentialSampler(Sampler):
        def __init__(self, data_source):
            self.data_source = data_source

        def __iter__(self):
            return iter(range(len(self.data_source)))

        def __len__(self):
            return len(self.data_source)

    class TestModel(BoringModel):
        def train_dataloader(self):
            dataset = RandomDataset(32, 64)
            sampler = NonSequentialSampler(dataset)
            return torch.utils.data.DataLoader(dataset, sampler=sampler)

        def val_dataloader(self):
            dataset = RandomDataset(32, 64)
            sampler = NonSequentialSampler(dataset)
            return torch.utils.data.DataLoader(dataset, sampler=sampler)

    model = TestModel()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, overfit_batches=2)

    with pytest.warns(UserWarning, match="requested to overfit but enabled train dataloader shuffling"):
        trainer.fit(model)

    assert isinstance(trainer.train_dataloader.sampler, SequentialSampler)
    assert isinstance(trainer.val_dataloaders.sampler, SequentialSampler)








def test_overfit_batches_same_batch_for_train_and_val(tmp_path):
    """Test that when overfit_batches=1, the same batch is used for both training and validation."""

    class TestModel(BoringModel):
        def __init__(self):
            super().__init__()
            self.train_batches = []
            self.val_batches = []

        def training_step(self, batch, batch_idx):
            self.train_batches.append(batch)
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch, batch_idx):
            self.val_batches.append(batch)
            return super().validation_step(batch, batch_idx)

    model = TestModel()
    trainer = Trainer(
        default_root_dir=tmp_path,
        max_epochs=2,
        overfit_batches=1,
        check_val_every_n_epoch=1,
        enable_model_summary=False,
    )
    trainer.fit(model)

    # Verify that the same batch was used for both training and validation
    assert len(model.train_batches) > 0
    assert len(model.val_batches) > 0

    # Compare the actual batch contents
    train_batch = model.train_batches[0]
    val_batch = model.val_batches[0]

    # Check if the batches are identical
    assert torch.equal(train_batch, val_batch), (
        "Training and validation batches should be identical when overfit_batches=1"
    )
