"""A TrainModule compiled by TorchScript (scripted, traced, its graph logged) with or without a Trainer, as a
LightningModule is: TorchScript reads every attribute of a module, and `trainer`/`fabric` refuse outside a run."""

from __future__ import annotations

import io
import os

import pytest
import torch

from fabricx.loggers import TensorBoardLogger
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.jit import jit_inspecting, jit_inspection


class Tiny(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.example_input_array = torch.randn(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class Outer(TrainModule):
    """A TrainModule inside another: tracing inspects each submodule too."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Tiny()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * 2


def test_every_property_of_a_train_module_is_left_out_of_scripting():
    properties = {name for name in dir(TrainModule) if isinstance(getattr(TrainModule, name), property)}
    assert properties <= set(TrainModule.__jit_unused_properties__)


def test_script_with_a_trainer_attached():
    model = Tiny()
    model.trainer = Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    scripted = torch.jit.script(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(scripted(x), model(x))


@pytest.mark.parametrize("method", ["script", "trace"])
def test_to_torchscript_without_a_trainer(method):
    model = Outer()
    model.train()
    buffer = io.BytesIO()
    compiled = model.to_torchscript(buffer, method=method, example_inputs=torch.randn(2, 4))
    x = torch.randn(5, 4)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(torch.jit.load(io.BytesIO(buffer.getvalue()))(x), model(x))
    assert model.training  # the mode is restored after the eval-mode compile


def test_to_torchscript_errors_are_lightnings():
    model = Tiny()
    with pytest.raises(ValueError, match="only supports 'script' or 'trace'"):
        model.to_torchscript(method="onnx")
    model.example_input_array = None
    with pytest.raises(ValueError, match="requires either `example_inputs` or `model.example_input_array`"):
        model.to_torchscript(method="trace")


def test_trainer_still_refuses_outside_an_inspection():
    model = Tiny()
    with pytest.raises(FabricxError, match="not attached to a `Trainer`"):
        _ = model.trainer
    with pytest.raises(FabricxError, match="not attached to a `Trainer`"):
        _ = model.fabric
    with jit_inspection():
        with jit_inspection():
            assert model.trainer is None
            assert model.fabric is None
        assert jit_inspecting()
    assert not jit_inspecting()
    with pytest.raises(FabricxError):
        _ = model.trainer


def test_tensorboard_log_graph_of_a_train_module(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path)
    logger.log_graph(Outer(), torch.randn(2, 4))
    logger.finalize("success")
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    assert events.Graph() is not None


@pytest.mark.parametrize("log_graph", [True, False])
def test_the_trainer_logs_the_graph_when_the_tensorboard_logger_asks(tmp_path, log_graph):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.data import DataLoader, TensorDataset

    class Trained(Outer):
        def training_step(self, batch, batch_idx):
            (x,) = batch
            return self(x).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Trained()
    model.example_input_array = torch.randn(2, 4)
    logger = TensorBoardLogger(tmp_path, log_graph=log_graph)
    assert logger.logs_graph is log_graph
    trainer = Trainer(
        accelerator="cpu", logger=logger, max_steps=1, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2))
    graph = False
    if os.path.isdir(logger.log_dir):  # nothing else is logged in one step: without the graph, no file at all
        events = EventAccumulator(logger.log_dir)
        events.Reload()
        graph = bool(events.Tags()["graph"])
    assert graph is log_graph
