"""save_state / load_state of the Accelerate adapter: naming, retention, what is restored, loader position."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, ProjectConfiguration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Counter:
    def __init__(self, value=0):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


def _auto(project, total_limit=None, **kwargs):
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=total_limit)
    return Accelerator(cpu=True, project_config=config, **kwargs)


def _names(project):
    return sorted(os.listdir(os.path.join(project, "checkpoints")), key=lambda n: int(n.split("_")[1]))


def test_automatic_names_start_at_zero_and_keep_counting_after_a_restart(tmp_path):
    accelerator = _auto(tmp_path, total_limit=2)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    paths = []
    for value in range(3):
        counter.value = value
        paths.append(accelerator.save_state())
    assert [os.path.basename(p) for p in paths] == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert _names(tmp_path) == ["checkpoint_1", "checkpoint_2"]
    assert accelerator.save_iteration == 3

    # a new run (fresh ProjectConfiguration, iteration=0) resumes and continues the numbering
    restarted = _auto(tmp_path, total_limit=2)
    restored = Counter(-1)
    restarted.register_for_checkpointing(restored)
    assert restarted.load_state().endswith("checkpoint_2")
    assert restored.value == 2
    assert os.path.basename(restarted.save_state()) == "checkpoint_3"
    assert _names(tmp_path) == ["checkpoint_2", "checkpoint_3"]


def test_load_state_picks_the_numerically_newest_complete_checkpoint(tmp_path):
    accelerator = _auto(tmp_path, total_limit=3)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    for value in range(11):
        counter.value = value
        accelerator.save_state()
    assert _names(tmp_path) == ["checkpoint_8", "checkpoint_9", "checkpoint_10"]  # "9" > "10" as text
    (tmp_path / "checkpoints" / "checkpoint_11").mkdir()  # a save that died before it was complete

    fresh = _auto(tmp_path, total_limit=3)
    restored = Counter(-1)
    fresh.register_for_checkpointing(restored)
    assert fresh.load_state().endswith("checkpoint_10")
    assert restored.value == 10
    assert os.path.basename(fresh.save_state()) == "checkpoint_12"  # never reuses an unfinished name


def test_explicit_output_dir_and_refusals(tmp_path):
    accelerator = Accelerator(cpu=True)
    counter = Counter(5)
    accelerator.register_for_checkpointing(counter)
    with pytest.raises(ValueError, match="output_dir"):
        accelerator.save_state()
    with pytest.raises(ValueError, match="input_dir"):
        accelerator.load_state()
    path = accelerator.save_state(tmp_path / "mine")
    counter.value = 0
    accelerator.load_state(path)
    assert counter.value == 5
    with pytest.raises(FileNotFoundError, match="nowhere"):
        accelerator.load_state(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        _auto(tmp_path / "empty").load_state()
    with pytest.warns(UserWarning, match="ignores the folder"):
        _auto(tmp_path / "auto").save_state(tmp_path / "elsewhere")


def _training_objects(accelerator, loader_seed=0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    generator = torch.Generator().manual_seed(loader_seed)
    data = TensorDataset(torch.randn(24, 4, generator=generator) * 0.1, torch.randn(24, 1, generator=generator) * 0.1)
    loader = DataLoader(data, batch_size=4, shuffle=True)
    return accelerator.prepare(model, optimizer, loader, scheduler)


def _step(accelerator, model, optimizer, scheduler, batch):
    x, y = batch
    accelerator.backward(nn.functional.mse_loss(model(x), y))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def test_save_and_load_state_restore_every_part(tmp_path):
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(cpu=True, mixed_precision="fp16", dataloader_config=config)
    model, optimizer, loader, scheduler = _training_objects(accelerator)
    counter = Counter(3)
    accelerator.register_for_checkpointing(counter)
    iterator = iter(loader)
    for _ in range(2):
        _step(accelerator, model, optimizer, scheduler, next(iterator))
    path = accelerator.save_state(tmp_path / "ckpt")
    saved = {
        "model": copy.deepcopy(accelerator.unwrap_model(model).state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "scheduler": scheduler.state_dict(),
        "scale": accelerator.scaler.get_scale(),
    }
    draws_after_save = torch.rand(4)
    remaining = [x.clone() for x, _ in iterator]

    # change everything, then load
    for batch in loader:
        _step(accelerator, model, optimizer, scheduler, batch)
    accelerator.scaler.update(new_scale=2.0)
    counter.value = 99
    accelerator.load_state(path)

    assert torch.equal(torch.rand(4), draws_after_save)  # random state restored
    state = accelerator.unwrap_model(model).state_dict()
    assert all(torch.equal(state[k], saved["model"][k]) for k in state)
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"], saved["optimizer"]["state"][0]["exp_avg"])
    assert scheduler.state_dict() == saved["scheduler"]
    assert accelerator.scaler.get_scale() == saved["scale"]
    assert counter.value == 3
    assert loader.batches_consumed == 2
    resumed = [x for x, _ in loader]
    assert len(resumed) == len(remaining) and all(torch.equal(a, b) for a, b in zip(resumed, remaining, strict=True))


def test_stateful_loader_reports_the_loaded_position_right_after_load_state(tmp_path):
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    first = Accelerator(cpu=True, dataloader_config=config)
    _, _, loader, _ = _training_objects(first)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    before = loader.state_dict()
    first.save_state(tmp_path / "a")
    expected_rest = [x for x, _ in iterator]

    second = Accelerator(cpu=True, dataloader_config=config)
    _, _, loader2, _ = _training_objects(second)
    second.load_state(tmp_path / "a")
    after = loader2.state_dict()  # before any iteration
    assert after["yielded"] == before["yielded"] == 3
    assert (after["iteration"], after["in_pass"]) == (before["iteration"], True)

    # saving right after loading writes that same position again
    second.save_state(tmp_path / "b")
    third = Accelerator(cpu=True, dataloader_config=config)
    _, _, loader3, _ = _training_objects(third)
    third.load_state(tmp_path / "b")
    rest = [x for x, _ in loader3]
    assert len(rest) == len(expected_rest) == 3
    assert all(torch.equal(a, b) for a, b in zip(rest, expected_rest, strict=True))


def test_without_stateful_loaders_the_epoch_restarts_and_skip_first_batches_resumes(tmp_path):
    accelerator = Accelerator(cpu=True)
    _, _, loader, _ = _training_objects(accelerator)
    iterator = iter(loader)
    next(iterator)
    accelerator.save_state(tmp_path / "c")
    fresh = Accelerator(cpu=True)
    _, _, loader2, _ = _training_objects(fresh)
    fresh.load_state(tmp_path / "c")
    assert loader2.batches_consumed == 0
    assert len(list(loader2)) == 6
    skipped = fresh.skip_first_batches(loader2, 4)
    assert len(skipped) == 2 and len(list(skipped)) == 2


def test_save_state_inside_an_accumulation_window_resumes_the_window(tmp_path):
    def objects():
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
        model, optimizer, loader, _ = _training_objects(accelerator)
        return accelerator, model, optimizer, [batch for batch in loader]

    def micro_batch(accelerator, model, optimizer, batch):
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(batch[0]), batch[1]))
            optimizer.step()
            optimizer.zero_grad()

    accelerator, model, optimizer, batches = objects()
    for batch in batches[:3]:
        micro_batch(accelerator, model, optimizer, batch)
    accelerator.save_state(tmp_path / "mid")  # one micro-batch into the second window
    for batch in batches[3:4]:
        micro_batch(accelerator, model, optimizer, batch)
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    fresh, model2, optimizer2, batches2 = objects()
    fresh.load_state(tmp_path / "mid")
    assert fresh.fabric._accumulation.counter == 1  # the window goes on where it was saved
    micro_batch(fresh, model2, optimizer2, batches2[3])
    assert all(torch.equal(expected[k], v) for k, v in model2.state_dict().items())


_SHUFFLE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed

    project, mode, out = sys.argv[1:4]

    class Progress:
        epoch = 0
        def state_dict(self):
            return {"epoch": self.epoch}
        def load_state_dict(self, state):
            self.epoch = state["epoch"]

    set_seed(7)
    accelerator = Accelerator(
        cpu=True,
        project_config=ProjectConfiguration(project, automatic_checkpoint_naming=True, total_limit=2),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(20)), batch_size=3, shuffle=True))
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if mode == "resume":
        accelerator.load_state()
    seen, draws, count = [], [], 0
    while progress.epoch < 2:
        for (ids,) in loader:
            seen.append(ids.tolist())
            draws.append(torch.rand(1).item())
            count += 1
            if mode == "stop" and count == 4:
                accelerator.save_state()
                json.dump({"seen": seen, "draws": draws}, open(out, "w"))
                sys.exit(0)
        progress.epoch += 1
    json.dump({"seen": seen, "draws": draws}, open(out, "w"))
    """
)


def test_shuffled_single_process_resume_in_a_fresh_process_replays_nothing(tmp_path):
    script = tmp_path / "shuffle_resume.py"
    script.write_text(_SHUFFLE_SCRIPT)

    def run(project, mode):
        out = tmp_path / f"{project}_{mode}.json"
        subprocess.run(
            [sys.executable, str(script), str(tmp_path / project), mode, str(out)],
            check=True,
            cwd=REPO,
            timeout=120,
            capture_output=True,
        )
        return json.loads(out.read_text())

    full = run("full", "full")
    stopped = run("split", "stop")
    resumed = run("split", "resume")
    assert len(full["seen"]) == 14  # 7 batches in each of 2 epochs
    assert stopped["seen"] + resumed["seen"] == full["seen"]
    assert stopped["draws"] + resumed["draws"] == full["draws"]
    for epoch in (full["seen"][:7], full["seen"][7:]):
        assert sorted(i for batch in epoch for i in batch) == list(range(20))  # every sample once per epoch
    assert full["seen"][:7] != full["seen"][7:]  # and the order is reshuffled per epoch
