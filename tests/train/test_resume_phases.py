"""`fit(ckpt_path=...)` restores in Lightning's two phases, `global_step`/`current_epoch` are the fit loop's
counters, and an optimizer's own step calls the training closure (Lightning's order)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import fabricx.train as fx
from fabricx.callbacks import Callback
from fabricx.precision import MixedPrecision


def _data(samples: int = 8) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(samples, 4, generator=generator)), batch_size=2)


def _trainer(tmp_path, **flags) -> fx.Trainer:
    options = dict(default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", max_epochs=1)
    return fx.Trainer(**{**options, **flags})


class _Module(fx.TrainModule):
    def __init__(self, calls: list | None = None, optimizer: type = torch.optim.SGD) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.calls = calls if calls is not None else []
        self.optimizer_class = optimizer
        self.state_at_configure: dict[str, torch.Tensor] = {}

    def training_step(self, batch, batch_idx):
        self.calls.append("training_step")
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        self.calls.append("configure_optimizers")
        self.state_at_configure = {k: v.clone() for k, v in self.state_dict().items()}
        return self.optimizer_class(self.parameters(), lr=0.1)


class _Recorder(Callback):
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def on_load_checkpoint(self, trainer, module, checkpoint):
        self.calls.append("Callback.on_load_checkpoint")

    def load_state_dict(self, state_dict):
        self.calls.append(("Callback.load_state_dict", state_dict))

    def state_dict(self):
        return {"seen": True}

    def on_fit_start(self, trainer, module):
        self.calls.append("Callback.on_fit_start")


def test_module_and_callbacks_are_restored_before_configure_optimizers(tmp_path):
    first = _Module()
    trainer = _trainer(tmp_path, callbacks=[_Recorder([])])
    trainer.fit(first, _data())
    trainer.save_checkpoint(tmp_path / "end.ckpt")

    calls: list = []

    class Renaming(_Module):
        def on_load_checkpoint(self, checkpoint):
            # As in Lightning, the hook sees the whole checkpoint (fabricx's own entries left out) and may change
            # the weights before they are loaded.
            calls.append(("on_load_checkpoint", sorted(checkpoint)))
            checkpoint["state_dict"]["layer.bias"] = torch.full((1,), 7.0)

    module = Renaming(calls)
    resumed = _trainer(tmp_path, max_epochs=2, callbacks=[_Recorder(calls)])
    resumed.fit(module, _data(), ckpt_path=tmp_path / "end.ckpt")

    keys = ["callbacks", "epoch", "global_step", "loops", "lr_schedulers", "optimizer_states",
            "pytorch-lightning_version", "state_dict"]
    assert calls[:5] == [
        ("on_load_checkpoint", keys),
        "Callback.on_load_checkpoint",
        ("Callback.load_state_dict", {"seen": True}),
        "configure_optimizers",
        "Callback.on_fit_start",
    ]
    # Loaded before configure_optimizers, with the hook's change.
    assert torch.equal(module.state_at_configure["layer.weight"], first.layer.weight.detach())
    assert torch.equal(module.state_at_configure["layer.bias"], torch.full((1,), 7.0))
    assert resumed.current_epoch == 2 and resumed.global_step == 8  # one more epoch of 4 steps
    assert calls.count("training_step") == 4


def test_a_float64_resume_loads_the_saved_values_exactly(tmp_path):
    trainer = _trainer(tmp_path, precision="64-true")
    first = _Module()
    trainer.fit(first, _data())
    trainer.save_checkpoint(tmp_path / "end.ckpt")
    saved = {k: v.clone() for k, v in first.state_dict().items()}
    assert saved["layer.weight"].dtype == torch.float64

    module = _Module()  # float32 until the precision converts it at setup
    resumed = _trainer(tmp_path, precision="64-true")  # the epoch is done: nothing more to train
    resumed.fit(module, _data(), ckpt_path=tmp_path / "end.ckpt")
    for key, value in module.state_dict().items():
        assert value.dtype == torch.float64
        assert torch.equal(value, saved[key]), key


def test_global_step_and_current_epoch_are_the_fit_loop_counters(tmp_path):
    trainer = _trainer(tmp_path)
    loop = trainer.fit_loop
    loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 5
    loop.epoch_progress.current.completed = 3
    assert (trainer.global_step, trainer.current_epoch) == (5, 3)
    assert (trainer.progress.global_step, trainer.progress.current_epoch) == (5, 3)

    class Manual(_Module):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            self.manual_backward(self.layer(batch[0]).pow(2).mean())
            optimizer.step()
            optimizer.step()
            optimizer.zero_grad()

    trainer = _trainer(tmp_path)
    trainer.fit(Manual(), _data())
    manual = trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.total.completed
    assert trainer.global_step == manual == 8
    assert trainer.current_epoch == 1


@pytest.mark.parametrize("scaled", [False, True])
def test_the_optimizer_step_calls_the_closure_unless_a_scaler_steps(tmp_path, scaled):
    calls: list = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            calls.append("step")
            return super().step(closure)

    # A scale of 1 keeps float16 gradients finite, so that the scaler steps every time.
    scaler = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1.0))
    trainer = _trainer(tmp_path, plugins=[scaler] if scaled else None, limit_train_batches=2)
    trainer.fit(_Module(calls, optimizer=Recording), _data())
    expected = ["training_step", "step"] if scaled else ["step", "training_step"]
    assert calls == ["configure_optimizers", *expected, *expected]
