"""Run resume-matrix cells of the Fabric loop: ``python fabric_job.py OUT PHASE CELL_ID...``.

PHASE ``first`` runs each cell's uninterrupted run (once per distinct training setup) and its first run up to
the stop point; ``resume`` loads each cell's checkpoint in this fresh process and runs to the end. Every cell
of one call shares its strategy and number of processes, so one Fabric serves them all. Each rank writes
``OUT/<phase>_rank<r>.pt``: per cell, the trace of batches and the final state (see `record.py`).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from cells import EPOCHS, OVERFLOWING_SCALER, Cell, by_id, refusal
from record import Trace, final_state
from toy_data import iterable_batches, make_loader

from fabricx import Fabric
from fabricx.utilities.exceptions import CheckpointError, FabricxError


def build_loader(fabric: Fabric, cell: Cell) -> Any:
    loader, use_distributed_sampler = make_loader(cell.loader, fabric.global_rank, fabric.world_size)
    return fabric.setup_dataloaders(loader, use_distributed_sampler=use_distributed_sampler)


def build(fabric: Fabric, cell: Cell) -> dict[str, Any]:
    fabric.seed_everything(cell.seed % 1000, verbose=False)
    fabric.accumulation_state.reset()  # the previous cell's run may have stopped inside a window
    scaler = getattr(fabric.strategy.precision, "scaler", None)
    if scaler is not None:  # each run starts with a new scaler, as its own script would (one Fabric serves them all)
        scaler.load_state_dict(OVERFLOWING_SCALER)
    fabric.grad_accum_steps = cell.accumulate
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.1), nn.Linear(8, 1))
    if cell.compile:
        model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    state: dict[str, Any] = {"epoch": 0, "step": 0}
    if cell.scheduler:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
        model, optimizer = fabric.setup(model, optimizer)
        state["scheduler"] = scheduler
    else:
        model, optimizer = fabric.setup(model, optimizer)
    state.update(model=model, optimizer=optimizer, loader=build_loader(fabric, cell))
    return state


def batches_per_epoch(fabric: Fabric, cell: Cell, loader: Any) -> int:
    if cell.loader.startswith("iterable"):
        return iterable_batches(fabric.global_rank, fabric.world_size)
    return len(loader)


def train(fabric: Fabric, cell: Cell, phase: str, checkpoint: Path) -> dict[str, Any]:
    """One run of ``cell``: ``straight``, ``first`` (stops at the stop point) or ``resume``."""
    state = build(fabric, cell)
    trace = Trace(checkpoint.with_suffix(".kill_trace.pt") if phase == "first" and cell.stop == "kill" else None)
    kill_step = None
    if phase == "resume":
        torch.manual_seed(12345 + fabric.global_rank)  # the resumed run must not depend on a fresh seed
        try:
            if cell.api == "fabric_latest":
                fabric.load_latest(checkpoint, state)
            else:
                fabric.load(checkpoint, state)
        except (FabricxError, CheckpointError) as error:
            if not refusal(cell):
                raise
            return {"refused": str(error)}
    elif phase == "first" and cell.stop == "start":
        return _stop(fabric, state, checkpoint, trace)
    if phase == "first" and cell.stop == "kill":
        kill_step = 2 + cell.seed % (2 * EPOCHS * 5 - 3)
    trace.start_step = state["step"]
    model, optimizer, loader = state["model"], state["optimizer"], state["loader"]
    scheduler = state.get("scheduler")
    for epoch in range(state["epoch"], EPOCHS):
        if cell.loader == "set_epoch_loop" or (phase == "first" and cell.stop == "after_set_epoch"):
            loader.set_epoch(epoch)
        if phase == "first" and cell.stop == "after_set_epoch" and epoch == cell.stop_epoch + 1:
            return _stop(fabric, state, checkpoint, trace)
        per_epoch = batches_per_epoch(fabric, cell, loader)
        for index, (ids, x, y) in enumerate(loader):
            with fabric.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                fabric.backward(loss)
                if cell.clip and fabric.sync_gradients:
                    fabric.clip_gradients(model, optimizer, max_norm=0.05)
                optimizer.step()
                optimizer.zero_grad()
                if scheduler is not None and cell.scheduler == "step":
                    scheduler.step()
            trace.add(state["step"], epoch, ids, loss)
            state["step"] += 1
            if phase != "first":
                continue
            if cell.stop == "kill":
                if state["step"] % 2 == 0:
                    fabric.save_checkpoint(checkpoint, state)
                if state["step"] == kill_step:
                    trace.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            elif (
                (cell.stop == "first" and state["step"] == 1)
                or (cell.stop == "mid" and epoch == cell.stop_epoch and index == per_epoch // 2)
                or (cell.stop == "last_in_for" and epoch == cell.stop_epoch and index == per_epoch - 1)
            ):
                return _stop(fabric, state, checkpoint, trace)
        if scheduler is not None and cell.scheduler == "epoch":
            scheduler.step()
        state["epoch"] = epoch + 1
        if phase == "first" and cell.stop == "after_for" and epoch == cell.stop_epoch:
            return _stop(fabric, state, checkpoint, trace)
    final = final_state(state, fabric.strategy.precision)
    return {"trace": trace.entries, "start_step": trace.start_step, "final": final}


def _stop(fabric: Fabric, state: dict[str, Any], checkpoint: Path, trace: Trace) -> dict[str, Any]:
    fabric.save(checkpoint, state)
    return {"trace": trace.entries, "start_step": trace.start_step, "stopped_at": state["step"]}


def run(fabric: Fabric, out_dir: Path, phase: str, ids: list[str]) -> None:
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for cell in map(by_id, ids):
        checkpoint = out_dir / cell.id
        if phase == "first":
            # A SIGKILL cell's first run is a process of its own (phase "kill"), which dies.
            results[cell.id] = {} if cell.stop == "kill" else {"first": train(fabric, cell, "first", checkpoint)}
            results[cell.id]["straight"] = train(fabric, cell, "straight", checkpoint)
        elif phase == "kill":
            train(fabric, cell, "first", checkpoint)
        else:
            results[cell.id] = {"resume": train(fabric, cell, "resume", checkpoint)}
    torch.save(results, out_dir / f"{phase}_rank{fabric.global_rank}.pt")


def fabric_for(cell: Cell, phase: str) -> Fabric:
    world = cell.resume_world if phase == "resume" else cell.world
    strategy = "ddp" if cell.strategy == "single" else cell.strategy
    if world == 1 and strategy in ("ddp", "ddp_spawn"):
        strategy = "auto"  # a sharded strategy keeps its strategy on one process, as a user's run would
    return Fabric(accelerator="cpu", devices=world, strategy=strategy, precision=cell.precision or "32-true")


def main() -> None:
    out, phase, *ids = sys.argv[1:]
    fabric = fabric_for(by_id(ids[0]), phase)
    fabric.launch(run, Path(out), phase, ids)


if __name__ == "__main__":
    main()
