"""Lightning 2.6.5's `tests/tests_pytorch/callbacks/test_rich_model_summary.py`, run against fabricx.

Only the imports differ (see README.md beside this file for the selection rule; Lightning's
`lightning.pytorch.utilities.model_summary.summarize` is `fabricx.train.module.summary`'s). Left out,
because they use names that are not public:

* `test_rich_progress_bar_import_error`: imports Lightning's `lightning.pytorch.callbacks.rich_model_summary` and patches its private `_RICH_AVAILABLE`
* `test_rich_summary_tuples`: uses Lightning's private `ModelSummary._get_summary_data`
* `test_rich_summary_model_size_formatting`: uses Lightning's private `ModelSummary._get_summary_data`
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
from unittest import mock

import pytest
import torch

from fabricx.train import Trainer
from fabricx.callbacks import RichModelSummary
from fabricx.callbacks import RichProgressBar
from _pl_boring import BoringModel
from fabricx.train.module.summary import summarize
from _pl_helpers import RunIf


@RunIf(rich=True)
def test_rich_model_summary_callback():
    trainer = Trainer(callbacks=RichProgressBar())

    assert any(isinstance(cb, RichModelSummary) for cb in trainer.callbacks)
    assert isinstance(trainer.progress_bar_callback, RichProgressBar)

