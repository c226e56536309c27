"""Lightning 2.6.5's `tests/tests_pytorch/callbacks/test_model_summary.py`, run against fabricx.

Only the imports differ (see README.md beside this file for the selection rule). Left out, because it uses a
name that is not public:

* `test_model_summary_callback_with_enable_model_summary_true`: reads Lightning's private `ModelSummary._max_depth`
"""

# ruff: noqa
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
from typing import Any

from fabricx.train import Trainer
from fabricx.callbacks import ModelSummary
from _pl_boring import BoringModel


def test_model_summary_callback_present_trainer():
    trainer = Trainer()
    assert any(isinstance(cb, ModelSummary) for cb in trainer.callbacks)

    trainer = Trainer(callbacks=ModelSummary())
    assert any(isinstance(cb, ModelSummary) for cb in trainer.callbacks)


def test_model_summary_callback_with_enable_model_summary_false():
    trainer = Trainer(enable_model_summary=False)
    assert not any(isinstance(cb, ModelSummary) for cb in trainer.callbacks)


def test_custom_model_summary_callback_summarize(tmp_path):
    class CustomModelSummary(ModelSummary):
        @staticmethod
        def summarize(
            summary_data: list[tuple[str, list[str]]],
            total_parameters: int,
            trainable_parameters: int,
            model_size: float,
            total_training_modes,
            **summarize_kwargs: Any,
        ) -> None:
            assert summary_data[1][0] == "Name"
            assert summary_data[1][1][0] == "layer"

            assert summary_data[2][0] == "Type"
            assert summary_data[2][1][0] == "Linear"

            assert summary_data[3][0] == "Params"
            assert total_parameters == 66
            assert trainable_parameters == 66

            assert summary_data[4][0] == "Mode"
            assert summary_data[4][1][0] == "train"

            assert summary_data[5][0] == "FLOPs"
            assert all(isinstance(x, str) for x in summary_data[5][1])

            assert total_training_modes == {"train": 1, "eval": 0}

    model = BoringModel()
    trainer = Trainer(default_root_dir=tmp_path, callbacks=CustomModelSummary(), max_steps=1)

    trainer.fit(model)
