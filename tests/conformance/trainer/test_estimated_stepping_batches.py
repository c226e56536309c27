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
from helpers.boring_classes import BoringModel
from helpers.public import public

from fabricx.train import Trainer

SingleDeviceXLAStrategy = public("fabricx.strategies", "SingleDeviceXLAStrategy")










@pytest.mark.parametrize("max_steps", [2, 100])
def test_num_stepping_batches_with_max_steps(max_steps, tmp_path):
    """Test stepping batches with `max_steps`."""
    trainer = Trainer(max_steps=max_steps, default_root_dir=tmp_path, logger=False, enable_checkpointing=False)
    model = BoringModel()
    trainer.fit(model)
    assert trainer.estimated_stepping_batches == max_steps








class MultiprocessModel(BoringModel):
    def on_train_start(self):
        assert self.trainer.estimated_stepping_batches == len(self.train_dataloader()) // self.trainer.world_size


