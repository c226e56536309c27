"""Lightning 2.6.5's `tests/tests_pytorch/trainer/connectors/test_callback_connector.py`, run against fabricx.

Only the imports differ (see README.md beside this file for the selection rule). Left out, because they
use names that are not public or pieces fabricx does not build:

* `test_checkpoint_callbacks_are_last`: patches Lightning's internals (`lightning.pytorch.trainer.connectors.callback_connector._RICH_AVAILABLE`, private); uses Lightning's private `_CallbackConnector` and `trainer.strategy._lightning_module`; uses the `BatchSizeFinder` callback (fabricx builds the Tuner's `scale_batch_size`, not the callback)
* `test_all_callback_states_saved_before_checkpoint_callback`: its `StatefulCallbackContent1.state_key` calls Lightning's private `Callback._generate_state_key`
* `test_attach_model_callbacks`: patches Lightning's internals (`lightning.pytorch.trainer.connectors.callback_connector._RICH_AVAILABLE`, private); uses Lightning's private `_CallbackConnector` and `trainer.strategy._lightning_module`
* `test_attach_model_callbacks_override_info`: uses Lightning's private `_CallbackConnector` and `trainer.strategy._lightning_module`
* `test_configure_external_callbacks`: its helper `_make_entry_point_query_mock` (dropped with it) patches Lightning's internals (`lightning.fabric.utilities.registry.entry_points`, the entry-point plugin loading) and reads Lightning's private `_PYTHON_GREATER_EQUAL_3_10_0`
* `test_validate_callbacks_list_function`: uses Lightning's private `_validate_callbacks_list`
* `test_raising_error_validate_callbacks_list_function`: uses Lightning's private `_validate_callbacks_list`
"""

# ruff: noqa
class _NotInFabricx:
    """Stands in for a Lightning name fabricx does not provide; only left-out tests use it."""

    def __init__(self, what):
        self.what = what

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(self.what)

    def __mro_entries__(self, bases):
        return (object,)

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
import contextlib
import logging
from unittest import mock
from unittest.mock import MagicMock, Mock, patch

import pytest
import torch

_PYTHON_GREATER_EQUAL_3_10_0 = _NotInFabricx("Lightning's private `_PYTHON_GREATER_EQUAL_3_10_0`")
from fabricx.callbacks import Callback
from fabricx.train import TrainModule as LightningModule
from fabricx.train import Trainer
from fabricx.callbacks import EarlyStopping
from fabricx.callbacks import GradientAccumulationScheduler
from fabricx.callbacks import LearningRateMonitor
from fabricx.callbacks import ModelCheckpoint
from fabricx.callbacks import ModelSummary
from fabricx.callbacks import ProgressBar
from fabricx.callbacks import TQDMProgressBar
BatchSizeFinder = _NotInFabricx("the `BatchSizeFinder` callback (fabricx builds the Tuner's `scale_batch_size`, not the callback)")
from _pl_boring import BoringModel
_CallbackConnector = _NotInFabricx("Lightning's private `_CallbackConnector`")
_validate_callbacks_list = _NotInFabricx("Lightning's private `_validate_callbacks_list`")


class StatefulCallbackContent0(Callback):
    def state_dict(self):
        return {"content0": 0}


class StatefulCallbackContent1(Callback):
    def __init__(self, unique=None, other=None):
        self._unique = unique
        self._other = other

    @property
    def state_key(self):
        return self._generate_state_key(unique=self._unique)

    def state_dict(self):
        return {"content1": self._unique}


class ExternalCallback(Callback):
    """A callback in another library that gets registered through entry points."""

    pass


def test_validate_unique_callback_state_key():
    """Test that we raise an error if the state keys collide, leading to missing state in the checkpoint."""

    class MockCallback(Callback):
        @property
        def state_key(self):
            return "same_key"

        def state_dict(self):
            # pretend these callbacks are stateful by overriding the `state_dict` hook
            return {"state": 1}

    with pytest.raises(RuntimeError, match="Found more than one stateful callback of type `MockCallback`"):
        Trainer(callbacks=[MockCallback(), MockCallback()])


# Test with single stateful callback
class StatefulCallback(Callback):
    def state_dict(self):
        return {"state": 1}


# Test with multiple stateful callbacks with unique state keys
class StatefulCallback1(Callback):
    @property
    def state_key(self):
        return "unique_key_1"

    def state_dict(self):
        return {"state": 1}


class StatefulCallback2(Callback):
    @property
    def state_key(self):
        return "unique_key_2"

    def state_dict(self):
        return {"state": 2}


# Test with multiple stateful callbacks with same state key
class ConflictingCallback(Callback):
    @property
    def state_key(self):
        return "same_key"

    def state_dict(self):
        return {"state": 1}


# Test with different types of stateful callbacks that happen to have same state key
class AnotherConflictingCallback(Callback):
    @property
    def state_key(self):
        return "same_key"  # Same key as ConflictingCallback

    def state_dict(self):
        return {"state": 3}
