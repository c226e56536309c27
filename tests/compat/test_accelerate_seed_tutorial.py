"""The seed tutorial ("Add Accelerate to your code") end to end through the adapter, with a tiny
transformers model built from a config: gradient accumulation 2, bf16 autocast, clipping on sync
steps, ``save_state()`` every 5 batches (batch 5 falls inside an accumulation window) with automatic
names and ``total_limit=2``, a stop, ``load_state()`` in a fresh process, and the rest of training.

The final weights equal the uninterrupted run's; ``save_model`` (sharded safetensors) and
``save_pretrained`` both reload with ``from_pretrained`` to the same weights. One and two processes;
the uninterrupted and the stopped run share one launch (one process: this one), the resume has its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES, BATCH, EPOCHS, SAVE_EVERY = 48, 4, 2, 5


def _model():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def _data():
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 40, (SAMPLES, 8), generator=generator)
    return TensorDataset(tokens, (tokens.sum(dim=1) % 2).long())


def train(project_dir: str, stop_after_batches: int = 0, resume: bool = False) -> dict:
    """The tutorial's loop; returns where it ended (``stopped`` or the final weights' folders)."""
    from torch.utils.data import DataLoader

    from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed

    set_seed(42)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + 0.1 * step))
    training_dataloader = DataLoader(_data(), batch_size=BATCH, shuffle=True)
    accelerator = Accelerator(
        mixed_precision="bf16",
        gradient_accumulation_steps=2,
        project_config=ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    progress = {"batches": 0}

    class Progress:
        def state_dict(self):
            return dict(progress)

        def load_state_dict(self, state):
            progress.update(state)

    accelerator.register_for_checkpointing(Progress())
    if resume:
        accelerator.load_state()
    start_epoch = progress["batches"] // len(training_dataloader)
    for _ in range(start_epoch, EPOCHS):
        model.train()
        for input_ids, labels in training_dataloader:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss = model(input_ids=input_ids, labels=labels).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            progress["batches"] += 1
            if progress["batches"] % SAVE_EVERY == 0:
                accelerator.save_state()
            if progress["batches"] == stop_after_batches:
                accelerator.end_training()
                return {"stopped": progress["batches"]}
    accelerator.wait_for_everyone()
    exported = os.path.join(project_dir, "exported")
    accelerator.save_model(model, exported, safe_serialization=True, max_shard_size="10KB")
    unwrapped_model = accelerator.unwrap_model(model)
    pretrained = os.path.join(project_dir, "pretrained")
    unwrapped_model.save_pretrained(
        pretrained, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    if accelerator.is_main_process:
        unwrapped_model.config.save_pretrained(exported)
        torch.save(unwrapped_model.state_dict(), os.path.join(project_dir, "final.pt"))
    accelerator.end_training()
    return {"checkpoints": sorted(os.listdir(os.path.join(project_dir, "checkpoints")))}


def _launch(processes: int, *args: str) -> None:
    if processes == 1:
        command = [sys.executable, __file__, *args]
    else:
        command = [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", str(processes)]
        command += [__file__, *args]
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-6000:])


@pytest.mark.distributed
@pytest.mark.parametrize("processes", [1, 2])
def test_seed_tutorial_stops_mid_window_and_resumes_exactly(tmp_path, processes):
    from transformers import AutoModelForSequenceClassification

    per_epoch = SAMPLES // BATCH // processes
    # Stop two batches after the last save that falls inside an accumulation window (an odd batch count).
    stop = 17 if processes == 1 else 7
    assert stop - 2 in range(SAVE_EVERY, EPOCHS * per_epoch, SAVE_EVERY) and (stop - 2) % 2 == 1
    full, split = tmp_path / "full", tmp_path / "split"
    if processes == 1:  # the uninterrupted and the stopped run here; the resume in a fresh process
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as in the resuming process: the same float summation order
        try:
            train(str(full))
            assert train(str(split), stop_after_batches=stop) == {"stopped": stop}
        finally:
            torch.set_num_threads(threads)
    else:
        _launch(processes, "first", str(full), str(split), str(stop))
    _launch(processes, "resume", str(split))
    report = json.loads((split / "report.json").read_text())
    assert report["resumed_from"] == f"checkpoint_{(stop - 2) // SAVE_EVERY - 1}"
    expected = torch.load(full / "final.pt")
    got = torch.load(split / "final.pt")
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    for folder in (split / "exported", split / "pretrained"):
        reloaded = AutoModelForSequenceClassification.from_pretrained(folder).state_dict()
        assert all(torch.equal(reloaded[k], got[k]) for k in got), folder
    assert len([f for f in os.listdir(split / "exported") if f.endswith(".safetensors")]) > 1  # sharded
    assert len(os.listdir(split / "checkpoints")) == 2  # total_limit


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, *rest = sys.argv[1:]
    if mode == "first":
        full, split, stop = rest[0], rest[1], int(rest[2])
        train(full)
        assert train(split, stop_after_batches=stop) == {"stopped": stop}
    else:
        split = rest[0]
        from fabricx.checkpoint.manager import CheckpointManager

        newest = CheckpointManager(split).latest()
        train(split, resume=True)
        if int(os.environ.get("RANK", 0)) == 0:
            with open(os.path.join(split, "report.json"), "w") as handle:
                json.dump({"resumed_from": None if newest is None else os.path.basename(newest)}, handle)
