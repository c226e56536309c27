"""One checkpoint pipeline for DDP, FSDP2 and DeepSpeed: process-count changes and exact mid-window resume.

Three launches (gloo on CPU, processes started like torchrun so that one process group serves a
Fabric per strategy), each running every strategy in turn:

1. two processes: an uninterrupted run per strategy (DeepSpeed: ZeRO-2, ZeRO-1, and ZeRO-2 accumulating
   by the engine's own ``gradient_accumulation_steps=2``) with ``Fabric(grad_accum_steps=2)`` that saves
   inside a window (after micro-batch 3) and at a boundary (after optimizer step 2);
2. one process: the same run saving at step 2 (for 1→2), and resuming the two-process boundary
   checkpoint (2→1), which must end where the two-process run ended; error types for a missing key;
   ZeRO-3 refuses a save inside a window, naming the alternatives;
3. two fresh processes: resume the mid-window checkpoint (bit-identical end: DDP, FSDP2, ZeRO-1, ZeRO-2
   with either accumulation), the boundary checkpoint (bit-identical) and the one-process checkpoint
   (1→2, ends where the one-process run ended).

A global batch is split over the ranks, so one process and two reach the same weights (up to float
summation order: 1e-5), and a resumed optimizer whose Adam moments were lost would not.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("DS_BUILD_OPS", "0")

import pytest
import torch
from torch import nn

from fabricx.environments.local import find_free_port

STEPS, ACCUM, PER_RANK, WORLD = 4, 2, 4, 2
STRATEGIES = ("ddp", "fsdp", "deepspeed")  # deepspeed: ZeRO-2
# ZeRO-1 keeps accumulated gradients on the parameters, ZeRO-2 in its optimizer's partitioned buffers;
# deepspeed_engine: ZeRO-2 accumulating by the engine's gradient_accumulation_steps (Fabric(grad_accum_steps=1)),
# in bf16 with fp32 gradient accumulation (ZeRO-2's flat fp32 partition buffers).
EXTRA = ("deepspeed_1", "deepspeed_engine")
MID_WINDOW = ("ddp", "fsdp", "deepspeed", *EXTRA)
MID, BOUNDARY = 3, 4  # micro-batch after which each checkpoint is saved (3: inside window 2)


def _strategy(name: str) -> Any:
    from fabricx.strategies import DDPStrategy, FSDPStrategy
    from fabricx.strategies.deepspeed import DeepSpeedStrategy

    timeout = timedelta(seconds=60)
    if name == "ddp":
        return DDPStrategy(timeout=timeout)
    if name == "fsdp":
        return FSDPStrategy(timeout=timeout)
    if name == "deepspeed_engine":
        strategy = DeepSpeedStrategy(stage=2, gradient_accumulation_steps=ACCUM, timeout=timeout)
        strategy.config["data_types"] = {"grad_accum_dtype": "fp32"}
        return strategy
    return DeepSpeedStrategy(stage={"deepspeed_1": 1, "deepspeed_3": 3}.get(name, 2), timeout=timeout)


def _batch(micro: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + micro)
    x = torch.randn(PER_RANK * WORLD, 4, generator=generator)
    y = torch.randn(PER_RANK * WORLD, 1, generator=generator)
    rows = slice(rank * PER_RANK, (rank + 1) * PER_RANK) if world == WORLD else slice(None)
    return x[rows], y[rows]


def _setup(fabric: Any) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=0.05))
    return {"model": model, "optimizer": optimizer, "micro": 0}


def _weights(fabric: Any, state: dict) -> dict[str, torch.Tensor]:
    full = fabric.strategy.get_module_state_dict(fabric.unwrap(state["model"]))  # collective under FSDP
    return {k: v.detach().float().clone() for k, v in full.items()}


def _train(
    fabric: Any, state: dict, until: int, saves: dict[int, Path] | None = None, background: bool = False
) -> dict:
    """Micro-batches state["micro"]+1 .. until, saving after those named in ``saves`` (``background``: with
    ``async_save=True``, training going on while the checkpoint is written)."""
    model, optimizer = state["model"], state["optimizer"]
    out: dict = {}
    handles = []
    while state["micro"] < until:
        x, y = _batch(state["micro"], fabric.global_rank, fabric.world_size)
        with fabric.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        state["micro"] += 1
        # The loop changes the learning rate, as a scheduler would: a resume must restore it with the optimizer
        # (DeepSpeed's elastic ZeRO-1/2 shards hold none; fabricx keeps it beside them).
        for group in optimizer.param_groups:
            group["lr"] *= 0.9
        if saves and state["micro"] in saves:
            try:
                handles.append(fabric.save(saves[state["micro"]], state, async_save=background))
                out[f"saved_{state['micro']}"] = _weights(fabric, state)
            except Exception as error:  # ZeRO-3 refuses inside a window: keep the message
                out[f"refused_{state['micro']}"] = f"{type(error).__name__}: {error}"
    out["final"] = _weights(fabric, state)
    for handle in handles:
        if handle is not None:
            handle.wait()
    return out


# -- the three launches (each runs in every process, for every strategy) ----------------------------------
def _two_process_runs(fabric: Any, name: str, root: Path) -> dict:
    state = _setup(fabric)
    saves = {MID: root / f"{name}_mid", BOUNDARY: root / f"{name}_boundary"}
    out = _train(fabric, state, STEPS * ACCUM, saves, background=True)  # resumed below: the async saves hold
    out["engine_files_written_by"] = sorted(_ENGINE_FILE_WRITERS)  # what the next micro-batches did not change
    _ENGINE_FILE_WRITERS.clear()
    return out


def _one_process_runs(fabric: Any, name: str, root: Path) -> dict:
    from fabricx.checkpoint.fabric_state import CheckpointKeyError
    from fabricx.utilities.exceptions import CheckpointError

    state = _setup(fabric)
    out = _train(fabric, state, STEPS * ACCUM, {BOUNDARY: root / f"{name}_single"})
    resumed = _setup(fabric)
    fabric.load(root / f"{name}_boundary", resumed)  # saved by two processes: 2 -> 1
    out["two_to_one_loaded"] = _weights(fabric, resumed)
    out["two_to_one_micro"] = resumed["micro"]
    out["two_to_one_final"] = _train(fabric, resumed, STEPS * ACCUM)["final"]
    try:  # a key the checkpoint lacks: the same error type and message shape for every strategy
        fabric.load(root / f"{name}_boundary", {**_setup(fabric), "missing": 1})
    except CheckpointKeyError as error:
        out["missing_key_error"] = (type(error).__name__, isinstance(error, KeyError), str(error))
    try:  # a mid-window checkpoint holds each rank's own gradients: same count only
        fabric.load(root / f"{name}_mid", _setup(fabric))
    except CheckpointError as error:
        out["mid_window_refused"] = str(error)
    out["non_strict_remainder"] = sorted(
        fabric.load(root / f"{name}_boundary", {"model": _setup(fabric)["model"]}, strict=False)
    )
    if name == "deepspeed":  # resumed without DeepSpeed: the weights load in full, the ZeRO optimizer state cannot
        from fabricx import Fabric

        plain = Fabric(accelerator="cpu", devices=1, strategy="auto")
        try:
            plain.load(root / f"{name}_boundary", _setup(plain))
        except CheckpointError as error:
            out["optimizer_without_engine_refused"] = (type(error).__name__, str(error))
        weights_only = {"model": _setup(plain)["model"]}
        plain.load(root / f"{name}_boundary", weights_only)
        out["weights_without_engine"] = _weights(plain, weights_only)
    return out


def _fresh_two_process_resumes(fabric: Any, name: str, root: Path) -> dict:
    out: dict = {}
    state = _setup(fabric)
    fabric.load(root / f"{name}_mid", state)
    out["mid_micro"] = state["micro"]
    out["mid_final"] = _train(fabric, state, STEPS * ACCUM)["final"]
    state = _setup(fabric)
    fabric.load(root / f"{name}_boundary", state)  # same process count: exact
    out["boundary_final"] = _train(fabric, state, STEPS * ACCUM)["final"]
    if name in EXTRA:
        return out
    state = _setup(fabric)
    fabric.load(root / f"{name}_single", state)  # saved by one process: 1 -> 2
    out["one_to_two_loaded"] = _weights(fabric, state)
    out["one_to_two_final"] = _train(fabric, state, STEPS * ACCUM)["final"]
    return out


_PHASES = {"two": _two_process_runs, "one": _one_process_runs, "resume": _fresh_two_process_resumes}


_ENGINE_FILE_WRITERS: set[str] = set()


def _record_engine_file_writer() -> None:
    """Note which thread writes DeepSpeed's engine files of an asynchronous save."""
    import threading

    from fabricx.strategies.deepspeed.async_save import EngineFiles

    write = EngineFiles.write

    def recorded(self: Any) -> None:
        _ENGINE_FILE_WRITERS.add(threading.current_thread().name)
        write(self)

    EngineFiles.write = recorded  # type: ignore[method-assign]


def _child(rank: int, world: int, port: int, phase: str, root: str) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    from fabricx import Fabric

    _record_engine_file_writer()

    results = {}
    for name in STRATEGIES if phase == "one" else (*STRATEGIES, *EXTRA):
        engine = name == "deepspeed_engine"
        fabric = Fabric(
            accelerator="cpu",
            devices=world,
            strategy=_strategy(name),
            grad_accum_steps=1 if engine else ACCUM,
            precision="bf16-mixed" if engine else "32-true",
        )
        results[name] = _PHASES[phase](fabric, name, Path(root))
        fabric.barrier()
    if phase == "one":  # ZeRO-3 cannot save inside a window: a clear refusal
        fabric = Fabric(accelerator="cpu", devices=world, strategy=_strategy("deepspeed_3"), grad_accum_steps=ACCUM)
        results["deepspeed_3"] = _train(fabric, _setup(fabric), 1, {1: Path(root) / "deepspeed_3_mid"})
    if rank == 0:
        torch.save(results, Path(root) / f"{phase}.pt")
    torch.distributed.destroy_process_group()


def _launch(phase: str, world: int, root: Path) -> dict:
    import torch.multiprocessing as mp

    mp.start_processes(_child, args=(world, find_free_port(), phase, str(root)), nprocs=world, start_method="spawn")
    return torch.load(root / f"{phase}.pt", weights_only=False)


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("pipeline")
    return {
        "two": _launch("two", WORLD, root),
        "one": _launch("one", 1, root),
        "resume": _launch("resume", WORLD, root),
        "root": root,
    }


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.timeout(600)
def test_process_count_changes_behave_the_same_for_every_strategy(runs: dict) -> None:
    errors = set()
    for name in STRATEGIES:
        two, one, resume = runs["two"][name], runs["one"][name], runs["resume"][name]
        # 1 and 2 processes train the same (split global batch), so a checkpoint of either resumes the other.
        assert _diff(one["final"], two["final"]) < 1e-5, name
        assert _diff(one["two_to_one_loaded"], two[f"saved_{BOUNDARY}"]) == 0.0, name
        assert one["two_to_one_micro"] == BOUNDARY
        assert _diff(one["two_to_one_final"], two["final"]) < 1e-5, name
        assert _diff(resume["one_to_two_loaded"], one[f"saved_{BOUNDARY}"]) == 0.0, name
        assert _diff(resume["one_to_two_final"], one["final"]) < 1e-5, name
        kind, is_key_error, message = one["missing_key_error"]
        assert is_key_error and "missing" in message and f"{name}_boundary" in message, (name, message)
        errors.add(kind)
        # What was not asked for comes back in full; a DeepSpeed optimizer's shards have no full form.
        expected = ["micro"] if name == "deepspeed" else ["micro", "optimizer"]
        assert one["non_strict_remainder"] == expected, name
    kind, message = runs["one"]["deepspeed"]["optimizer_without_engine_refused"]
    assert kind == "CheckpointError" and "['optimizer']" in message and "deepspeed engine files" in message, message
    assert "SingleDeviceStrategy" in message and "strategy='deepspeed_stage_2' with devices=1" in message, message
    assert _diff(runs["one"]["deepspeed"]["weights_without_engine"], runs["two"]["deepspeed"][f"saved_{BOUNDARY}"]) == 0
    assert errors == {"CheckpointKeyError"}


@pytest.mark.distributed
@pytest.mark.deepspeed
@pytest.mark.timeout(600)
def test_mid_window_saves_resume_bit_identically(runs: dict) -> None:
    for name in MID_WINDOW:
        two, resume = runs["two"][name], runs["resume"][name]
        assert f"saved_{MID}" in two, two.get(f"refused_{MID}")
        assert resume["mid_micro"] == MID
        if name in STRATEGIES:
            refused = runs["one"][name]["mid_window_refused"]
            assert "accumulation window" in refused and "2 process(es)" in refused, refused
        assert _diff(resume["mid_final"], two["final"]) == 0.0, name
    for name in (*STRATEGIES, *EXTRA):
        assert _diff(runs["resume"][name]["boundary_final"], runs["two"][name]["final"]) == 0.0, name
        # The two-process saves were asynchronous; DeepSpeed's engine files were written in the background.
        writers = runs["two"][name]["engine_files_written_by"]
        assert writers == (["fabricx-async-save"] if name.startswith("deepspeed") else []), (name, writers)
    # What the ZeRO-2 mid-window checkpoints hold: the optimizer's partitioned running sums (fabric.accumulate)
    # (one per parameter, fp32) or flat fp32 partitions (bf16 weights), and the engine's micro-step (3: inside
    # its second window).
    from fabricx.accumulation.entries import GRADIENTS_KEY
    from fabricx.checkpoint.format import read_checkpoint

    for rank in range(WORLD):
        fabric_window = read_checkpoint(runs["root"] / "deepspeed_mid", rank).per_rank[GRADIENTS_KEY]["model"]
        engine_window = read_checkpoint(runs["root"] / "deepspeed_engine_mid", rank).per_rank[GRADIENTS_KEY]["model"]
        assert "zero2_accumulated" in fabric_window and fabric_window["stage"] == 2, sorted(fabric_window)
        assert "zero2_partitions" in engine_window and engine_window["micro_steps"] == MID, engine_window
    refusal = runs["one"]["deepspeed_3"]["refused_1"]
    assert "accumulation window" in refusal and "window boundary" in refusal and "stage=2" in refusal, refusal
