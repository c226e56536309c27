"""The Accelerate tutorial's code, with only the import changed, and the example script built from it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx.compat.accelerate import Accelerator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "accelerate_tutorial.py")

# The tutorial's snippets as printed (diff markers applied); `from accelerate import` became
# `from fabricx.compat.accelerate import`.
CREATE = """
from fabricx.compat.accelerate import Accelerator

accelerator = Accelerator()
"""

DEVICE = """
device = accelerator.device
model.to(device)
"""

PREPARE = """
model, optimizer, training_dataloader, scheduler = accelerator.prepare(
    model, optimizer, training_dataloader, scheduler
)
"""

FULL_LOOP = """
from fabricx.compat.accelerate import Accelerator
accelerator = Accelerator()

device = accelerator.device
model, optimizer, training_dataloader, scheduler = accelerator.prepare(
    model, optimizer, training_dataloader, scheduler
)

for batch in training_dataloader:
    optimizer.zero_grad()
    inputs, targets = batch
    outputs = model(inputs)
    loss = loss_function(outputs, targets)
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
"""

ACCUMULATION = """
accelerator = Accelerator(gradient_accumulation_steps=2)
model, optimizer, training_dataloader = accelerator.prepare(model, optimizer, training_dataloader)

for input, label in training_dataloader:
    with accelerator.accumulate(model):
        predictions = model(input)
        loss = loss_function(predictions, label)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
"""

MIXED_PRECISION = """
accelerator = Accelerator(mixed_precision="fp16")
with accelerator.autocast():
    loss = complex_loss_function(outputs, target)
"""

SAVE_MODEL = """
accelerator.wait_for_everyone()
accelerator.save_model(model, save_directory)
"""

LOAD_WEIGHTS = """
unwrapped_model = accelerator.unwrap_model(model)
path_to_checkpoint = os.path.join(save_directory,"pytorch_model.bin")
unwrapped_model.load_state_dict(torch.load(path_to_checkpoint))
"""


def _namespace(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(22, 6, generator=generator), torch.randn(22, 1, generator=generator))
    return {
        "os": os,
        "torch": torch,
        "Accelerator": Accelerator,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "training_dataloader": DataLoader(data, batch_size=4, shuffle=True),
        "loss_function": nn.MSELoss(),
        "complex_loss_function": lambda out, tgt: ((out - tgt) ** 2).mean() + out.abs().mean(),
        "outputs": torch.randn(4, 1),
        "target": torch.randn(4, 1),
        "save_directory": str(tmp_path / "saved"),
    }


def _run(snippet, namespace):
    exec(compile(snippet, "<tutorial>", "exec"), namespace)
    return namespace


def test_create_move_and_prepare_snippets(tmp_path):
    ns = _run(CREATE + DEVICE + PREPARE, _namespace(tmp_path))
    assert ns["device"] == torch.device("cpu") or ns["device"].type in ("cuda", "mps")
    assert ns["accelerator"].unwrap_model(ns["model"]) is not None
    assert len(ns["training_dataloader"]) == 6


def test_full_training_loop_snippet_trains(tmp_path):
    ns = _namespace(tmp_path)
    before = [p.detach().clone() for p in ns["model"].parameters()]
    ns = _run(FULL_LOOP, ns)
    after = list(ns["accelerator"].unwrap_model(ns["model"]).parameters())
    assert all(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert ns["scheduler"].last_epoch == 6  # one step per batch


# The snippet steps a scheduler it did not prepare on every micro-batch, also where the optimizer
# skipped its step; torch warns about that order, as it would with Accelerate.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`:UserWarning")
def test_gradient_accumulation_snippet_steps_every_second_batch(tmp_path):
    ns = _namespace(tmp_path)
    steps = []
    ns["optimizer"].register_step_post_hook(lambda *args: steps.append(1))
    ns = _run(ACCUMULATION, ns)
    # the loop's step() is called 6 times; the user's optimizer really steps for windows 2, 2, 2
    assert len(steps) == 3
    # the snippet steps the scheduler it did not prepare, once per batch, as the tutorial's code says
    assert ns["scheduler"].last_epoch == 6


def test_mixed_precision_snippet(tmp_path):
    ns = _run(MIXED_PRECISION, _namespace(tmp_path))
    assert ns["accelerator"].mixed_precision == "fp16"
    assert torch.isfinite(ns["loss"])


def test_save_model_then_load_weights_snippets(tmp_path):
    ns = _run(CREATE + PREPARE + SAVE_MODEL, _namespace(tmp_path))
    assert os.listdir(ns["save_directory"]) == ["model.safetensors"]
    # The loading snippet reads pytorch_model.bin: the file save_model writes with safe_serialization=False.
    ns["accelerator"].save_model(ns["model"], ns["save_directory"], safe_serialization=False)
    expected = {k: v.clone() for k, v in ns["accelerator"].unwrap_model(ns["model"]).state_dict().items()}
    with torch.no_grad():
        for p in ns["model"].parameters():
            p.zero_()
    ns = _run(LOAD_WEIGHTS, ns)
    loaded = ns["unwrapped_model"].state_dict()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


# -- examples/accelerate_tutorial.py -----------------------------------------------------------------------


def _example(project, *args):
    result = subprocess.run(
        [sys.executable, EXAMPLE, "--project-dir", str(project), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _weights(project):
    return load_file(os.path.join(project, "model", "model.safetensors"))


def test_example_resumed_in_a_fresh_process_ends_with_the_same_weights(tmp_path):
    out = _example(tmp_path / "full")
    assert "finished: 27 optimizer steps" in out
    # Saved every 3 steps: the run that stops after step 7 says --resume continues from step 6's checkpoint.
    stopped = _example(tmp_path / "split", "--stop-after", "7")
    assert "stopping early after step 7 (last checkpoint at step 6; --resume continues there)" in stopped, stopped
    assert sorted(os.listdir(tmp_path / "split" / "checkpoints")) == ["checkpoint_0", "checkpoint_1"]
    out = _example(tmp_path / "split", "--resume")
    assert "resumed at epoch 0, step 6" in out
    full, resumed = _weights(tmp_path / "full"), _weights(tmp_path / "split")
    assert full.keys() == resumed.keys()
    assert all(torch.equal(full[k], resumed[k]) for k in full)
    # numbering went on from the resumed checkpoint, and total_limit=2 kept the last two
    assert sorted(os.listdir(tmp_path / "split" / "checkpoints")) == ["checkpoint_7", "checkpoint_8"]
    assert (tmp_path / "split" / "accelerate_tutorial" / "version_1" / "metrics.csv").is_file()


def test_example_runs_with_fp16_on_cpu(tmp_path):
    out = _example(tmp_path, "--mixed-precision", "fp16", "--epochs", "1", "--gradient-accumulation-steps", "3")
    assert "finished: 6 optimizer steps" in out
