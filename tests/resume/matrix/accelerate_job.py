"""Run resume-matrix cells of the Accelerate adapter: ``python accelerate_job.py OUT PHASE CELL_ID...``.

``accelerate`` cells use ``DataLoaderConfiguration(use_stateful_dataloader=True)``: ``load_state`` restores the
loader's position. ``accelerate_skip`` cells follow Accelerate's examples (``by_feature/checkpointing.py``): the
loader is not stateful, and the resumed run skips the batches of the stopped epoch it had already read with
``skip_first_batches``. The counters of the run are a registered object, as Accelerate's docs show.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from cells import EPOCHS, Cell, by_id, refusal
from record import Trace, final_state
from toy_data import IdDataset

from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, set_seed
from fabricx.utilities.exceptions import CheckpointError, FabricxError

BATCH = 4


class Counters:
    def __init__(self) -> None:
        self.epoch = 0
        self.step = 0
        self.step_in_epoch = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step, "step_in_epoch": self.step_in_epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.step, self.step_in_epoch = state["epoch"], state["step"], state["step_in_epoch"]


def train(cell: Cell, phase: str, out: Path) -> dict[str, Any]:
    stateful = cell.api == "accelerate"
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=cell.accumulate,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful),
    )
    world = cell.resume_world if phase == "resume" else cell.world
    assert accelerator.num_processes == world, f"{accelerator.num_processes} processes run a {world}-process run"
    set_seed(cell.seed % 1000)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    kwargs: dict[str, Any] = {"batch_size": BATCH, "shuffle": True}
    if cell.loader == "shuffle_generator":
        kwargs["generator"] = torch.Generator().manual_seed(7)
    if cell.loader == "workers":
        kwargs["num_workers"] = 2
    loader = DataLoader(IdDataset(40, augment=True), **kwargs)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    counters = Counters()
    accelerator.register_for_checkpointing(counters)
    folder = out / cell.id
    if phase == "resume":
        torch.manual_seed(4321)
        try:
            accelerator.load_state(str(folder))
        except (FabricxError, CheckpointError) as error:
            if not refusal(cell):
                raise
            return {"refused": str(error)}
    trace = Trace()
    trace.start_step = counters.step
    per_epoch = len(loader)
    for epoch in range(counters.epoch, EPOCHS):
        active = loader
        if phase == "resume" and not stateful and epoch == counters.epoch and counters.step_in_epoch:
            active = accelerator.skip_first_batches(loader, counters.step_in_epoch)
        for ids, x, y in active:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            trace.add(counters.step, epoch, ids, loss)
            counters.step += 1
            counters.step_in_epoch += 1
            index = counters.step_in_epoch - 1
            if phase == "first" and (
                (cell.stop == "first" and counters.step == 1)
                or (cell.stop == "mid" and epoch == 1 and index == per_epoch // 2)
                or (cell.stop == "last_in_for" and epoch == 1 and index == per_epoch - 1)
            ):
                accelerator.save_state(str(folder))
                return {"trace": trace.entries, "start_step": trace.start_step}
        counters.epoch, counters.step_in_epoch = epoch + 1, 0
        if phase == "first" and cell.stop == "after_for" and epoch == 1:
            accelerator.save_state(str(folder))
            return {"trace": trace.entries, "start_step": trace.start_step}
    state = {"model": accelerator.unwrap_model(model), "optimizer": optimizer, "step": counters.step}
    return {"trace": trace.entries, "start_step": trace.start_step, "final": final_state(state)}


def main() -> None:
    out, phase, *ids = sys.argv[1:]
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    rank = int(os.environ.get("RANK", 0))  # as `accelerate launch` sets it
    for cell in map(by_id, ids):
        if phase == "first":
            straight = train(cell, "straight", Path(out))
            results[cell.id] = {"straight": straight, "first": train(cell, "first", Path(out))}
        else:
            results[cell.id] = {"resume": train(cell, "resume", Path(out))}
    torch.save(results, Path(out) / f"{phase}_rank{rank}.pt")


if __name__ == "__main__":
    main()
