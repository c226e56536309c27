"""Per-step cost of ``Trainer.fit`` against the same training written as a plain Fabric loop, and of Lightning's
own Trainer on the same module (targets: fabricx's Trainer <= 1.03x the Fabric loop, and below Lightning's).

Also a step that costs milliseconds (`measure_transformer`: one transformer block, ``transformer_ratio``, target
<= 1.02), where the Trainer's fixed cost per step is what it would be in real training.

The model is the tiny MLP (32 -> 64 -> 1, batch 32, in-memory data, SGD, seeded). Both variants
run the same number of optimizer steps on one CPU process in float32 and include their own set-up
(building the Fabric, ``setup``, ``setup_dataloaders``). Repeats are interleaved (loop, trainer,
loop, trainer, ...) so that machine noise hits both alike; the median time per step is reported.

What is on in the Trainer run: ``training_step`` logs the loss with ``self.log`` (step values),
the default CSVLogger (written every ``log_every_n_steps=50`` steps), hook dispatch and progress
counting. Off: the progress bar, the model summary, checkpointing (``enable_checkpointing=False``)
and validation (no validation data).

Lightning's Trainer runs the same module ported as a ``LightningModule`` (only the imports differ)
with the same settings (its ``CSVLogger``, ``log_every_n_steps=50``, no progress bar, summary,
checkpointing or validation), where lightning is installed. The three take turns over the repeats.

``instruction_steps > 0`` also counts the instructions of a step of each (valgrind's callgrind, as
:mod:`benchmarks.instructions` counts the loops): ``instructions_ratio`` (the Trainer over the Fabric loop) and
``lightning_trainer_instructions_ratio``, figures a busy machine does not move, and
``without_log_instructions_ratio``: the Trainer running the module without its ``self.log`` (what the Trainer's
own step costs, apart from logging a value). ``own_work_instructions_ratio`` (target <= 1.03) sets that against
``fabric_step_loop``, a Fabric loop calling the same module's ``training_step`` through its forward (the same user
code on both sides); ``log_call_instructions`` (target <= 15k) counts one ``self.log`` of the loss directly, inside
a running ``training_step`` (``LOG_CALLS`` calls, less as many turns of an empty loop), and Lightning's beside it
(``lightning_log_call_instructions``); ``log_instructions_per_call`` is the Trainer with the ``self.log`` less the
Trainer without it (one call per step: the call, plus the loggers' writes every 50 steps shared out, plus the
difference the hash seed makes to two processes' counts, up to a few thousand instructions a step either way),
``lightning_log_instructions_per_call`` the same for Lightning's; the
``*_fixed_instructions_per_step`` and ``*_fixed_us_per_step`` are what each Trainer adds to a step (its ``self.log``
included) over ``fabric_step_loop``. All of them run in one process
under ``valgrind --instr-atstart=no``, one epoch each; the dataset itself marks the steps (its
``__getitems__``, called once per batch by the DataLoader on every side alike), and counting runs from the
fetch of batch W to that of W+N and from there to W+3N: the difference of the two counts over N is the cost
of one step, start and stop costs subtracted. W (60) puts one-time costs (the first logger write at step 50)
before any count; N defaults to 100, a multiple of ``log_every_n_steps``, so each stretch holds whole logging
intervals. Without valgrind the result says "not available" and why.

Run::

    python -m benchmarks.trainer_overhead [--steps 2000] [--repeats 7] [--instruction-steps 100]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.seed import seed_everything

BATCH = 32
SAMPLES = 32 * 64  # 64 batches per epoch
WARM_STEPS = 60  # before the first count: past the first logger write (step 50) and the first steps' allocations


def _data(samples: int = SAMPLES) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=generator)
    y = x.sum(dim=1, keepdim=True) * 0.1
    return TensorDataset(x, y)


class MarkedDataset(TensorDataset):
    """A `TensorDataset` that calls ``on_batch()`` once per batch fetched (the DataLoader's ``__getitems__``),
    the same call on every side: where instruction counts start and stop."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        super().__init__(*tensors)
        self.on_batch: Callable[[], None] | None = None

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, ...]]:
        if self.on_batch is not None:
            self.on_batch()
        return [tuple(tensor[index] for tensor in self.tensors) for index in indices]


class _SteadyClock:
    """Times a run from the fetch of batch ``start`` to that of batch ``stop`` (the DataLoader's
    ``__getitems__``, the same call on every side): the per-step time of the run's steady state, with no
    set-up, first steps or shutdown in it, and no second run's set-up subtracted."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.fetched = 0
        self.started_at: float | None = None
        self.seconds_per_step: float | None = None

    def __call__(self) -> None:
        self.fetched += 1
        if self.fetched == self.start:
            self.started_at = time.perf_counter()
        elif self.fetched == self.stop and self.started_at is not None:
            self.seconds_per_step = (time.perf_counter() - self.started_at) / (self.stop - self.start)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


class MLPModule(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


LOG_CALLS = 200  # self.log calls counted directly, in one training_step (see `_CallCounter`)


class _CallCounter:
    """Inside a ``training_step`` of batch ``WARM_STEPS``: counts `LOG_CALLS` ``self.log("loss", loss)`` calls
    (label ``<side>-log-calls``) and as many turns of an empty loop (``<side>-empty-calls``)."""

    def __init__(self, shim: Any, side: str) -> None:
        self.shim, self.side = shim, side

    def __call__(self, module: Any, loss: torch.Tensor, batch_idx: int) -> None:
        if batch_idx != WARM_STEPS:
            return
        import gc

        log = module.log
        for label, call in (("log-calls", lambda: log("loss", loss)), ("empty-calls", lambda: None)):
            call()  # the first call of a label's kind, outside the count
            gc.collect()
            gc.disable()
            self.shim.fx_start()
            self.shim.fx_zero()
            for _ in range(LOG_CALLS):
                call()
            self.shim.fx_dump(f"{self.side}-{label}".encode())
            self.shim.fx_stop()
            gc.enable()


def _counting(base: type, counter: _CallCounter) -> Any:
    """``base`` (the module on either Trainer) whose ``training_step`` also has ``counter`` count its ``self.log``."""

    class Counting(base):
        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.log("loss", loss)
            counter(self, loss, batch_idx)
            return loss

    return Counting


class MLPModuleWithoutLog(MLPModule):
    """`MLPModule` without its ``self.log``: the instruction count of the Trainer's own work per step, apart
    from what logging a value costs (keeping the value, its bookkeeping, the loggers' writes)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)


def run_step_loop(
    dataset: TensorDataset, steps: int, module_class: type[TrainModule] = MLPModuleWithoutLog, batch_size: int = BATCH
) -> float:
    """A hand-written Fabric loop that calls the module's own ``training_step`` through its forward (what the
    Trainer calls), with the optimizer its ``configure_optimizers`` returns; returns seconds. The baseline of the
    Trainer's own work: the same module code on both sides, only the loop around it differs."""
    start = time.perf_counter()
    seed_everything(0)
    fabric = Fabric(accelerator="cpu", devices=1)
    module = module_class()
    model, optimizer = fabric.setup(module, module.configure_optimizers())
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=batch_size, shuffle=True))
    done = 0
    while done < steps:
        for batch_idx, batch in enumerate(loader):
            loss = model.training_step(batch, batch_idx)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done >= steps:
                break
    return time.perf_counter() - start


def run_loop(dataset: TensorDataset, steps: int) -> float:
    """The hand-written Fabric loop; returns seconds."""
    start = time.perf_counter()
    seed_everything(0)
    fabric = Fabric(accelerator="cpu", devices=1)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=BATCH, shuffle=True))
    done = 0
    while done < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done >= steps:
                break
    return time.perf_counter() - start


def run_trainer(
    dataset: TensorDataset, steps: int, root: str, module_class: type[TrainModule] = MLPModule, batch_size: int = BATCH
) -> float:
    """The same training through Trainer.fit; returns seconds."""
    start = time.perf_counter()
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
        seed=0,
    )
    trainer.fit(module_class(), DataLoader(dataset, batch_size=batch_size, shuffle=True))
    assert trainer.global_step == steps
    return time.perf_counter() - start


def _lightning_module_class(log: bool = True, count_calls: _CallCounter | None = None) -> type:
    """MLPModule ported to Lightning: the same class body, ``LightningModule`` instead of ``TrainModule`` (without
    its ``self.log`` when not ``log``; counting its ``self.log`` calls with ``count_calls``)."""
    import lightning as L

    class LitMLPModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            if log:
                self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return LitMLPModule if count_calls is None else _counting(LitMLPModule, count_calls)


def run_lightning_trainer(
    dataset: TensorDataset, steps: int, root: str, log: bool = True,
    count_calls: _CallCounter | None = None,
) -> float:
    """The same training through Lightning's Trainer.fit; returns seconds."""
    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    start = time.perf_counter()
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger(root, name="lightning"),
        log_every_n_steps=50,
        default_root_dir=root,
    )
    trainer.fit(_lightning_module_class(log, count_calls)(), DataLoader(dataset, batch_size=BATCH, shuffle=True))
    assert trainer.global_step == steps
    return time.perf_counter() - start


def measure(steps: int = 300, repeats: int = 5, instruction_steps: int = 0) -> dict[str, Any]:
    """Microseconds per step of the Fabric loop, fabricx's Trainer and Lightning's Trainer, interleaved.

    Each repeat runs every candidate for ``steps`` and for ``2 * steps`` steps: ``*_us_per_step`` is the
    median of (long - short) / steps, the cost of a step with each run's fixed set-up (building the
    Trainer, loggers, the first epoch's iterator) subtracted; ``*_with_setup_us_per_step`` is the long
    run's time over its steps, set-up included; ``*_steady_us_per_step`` is the long run timed inside
    itself, from the fetch of batch 60 to that of batch ``2 * steps - 2`` (epoch ends included), which
    no set-up's noise moves (``steady_ratio``).
    """
    import logging

    torch.set_num_threads(1)
    dataset = MarkedDataset(*_data().tensors)
    runs: dict[str, Any] = {
        "fabric_loop": lambda n, root: run_loop(dataset, n),
        "fabric_step_loop": lambda n, root: run_step_loop(dataset, n),
        "trainer": lambda n, root: run_trainer(dataset, n, root),
    }
    if importlib.util.find_spec("lightning") is not None:
        runs["lightning_trainer"] = lambda n, root: run_lightning_trainer(dataset, n, root)
        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # "GPU available: False" lines
    per_step: dict[str, list[float]] = {name: [] for name in runs}
    with_setup: dict[str, list[float]] = {name: [] for name in runs}
    steady: dict[str, list[float]] = {name: [] for name in runs}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as root:
        warnings.simplefilter("ignore")  # Lightning's advice (num_workers, logging interval) is not measured
        for run in runs.values():
            run(50, root)  # warm-up: first-call costs (imports, allocator) are not what we measure
        for repeat in range(repeats):
            names = list(runs)
            for name in names[repeat % len(names):] + names[: repeat % len(names)]:
                short = runs[name](steps, root)
                clock = dataset.on_batch = _SteadyClock(start=WARM_STEPS, stop=2 * steps - 2)
                long = runs[name](2 * steps, root)
                dataset.on_batch = None
                per_step[name].append((long - short) / steps)
                with_setup[name].append(long / (2 * steps))
                if clock.seconds_per_step is not None:
                    steady[name].append(clock.seconds_per_step)
    medians = {name: statistics.median(values) for name, values in per_step.items()}
    result: dict[str, Any] = {f"{name}_us_per_step": value * 1e6 for name, value in medians.items()}
    result.update(
        {f"{name}_with_setup_us_per_step": statistics.median(v) * 1e6 for name, v in with_setup.items()}
    )
    result["ratio"] = medians["trainer"] / medians["fabric_loop"]
    if all(steady.values()):
        steady_medians = {name: statistics.median(values) for name, values in steady.items()}
        result.update({f"{name}_steady_us_per_step": value * 1e6 for name, value in steady_medians.items()})
        result["steady_ratio"] = steady_medians["trainer"] / steady_medians["fabric_loop"]
        # What each Trainer adds to a step (self.log of the loss included): over the loop calling the same
        # module's training_step (without its self.log).
        result["trainer_fixed_us_per_step"] = (steady_medians["trainer"] - steady_medians["fabric_step_loop"]) * 1e6
        if "lightning_trainer" in steady_medians:
            result["lightning_trainer_steady_ratio"] = (
                steady_medians["lightning_trainer"] / steady_medians["fabric_loop"]
            )
            result["lightning_trainer_fixed_us_per_step"] = (
                steady_medians["lightning_trainer"] - steady_medians["fabric_step_loop"]
            ) * 1e6
    if "lightning_trainer" in medians:
        result["lightning_trainer_ratio"] = medians["lightning_trainer"] / medians["fabric_loop"]
        result["trainer_vs_lightning_trainer"] = medians["trainer"] / medians["lightning_trainer"]
    result.update(measure_transformer(repeats=repeats))
    if instruction_steps > 0:
        result.update(measure_instructions(instruction_steps))
    return result


# -- a step that takes milliseconds: a transformer block ---------------------------------------------------------
TRANSFORMER_BATCH = 4


class BlockModule(MLPModule):
    """`MLPModule` with one pre-norm transformer block (`benchmarks.compile_overhead.Block`: width 128, 4 heads,
    64 positions) as its network, learning to reproduce its input; ``training_step`` logs the loss."""

    def __init__(self) -> None:
        from benchmarks.compile_overhead import Block

        super().__init__()
        self.net = Block()


def measure_transformer(steps: int = 80, repeats: int = 5) -> dict[str, Any]:
    """Milliseconds per step of `BlockModule` through ``Trainer.fit`` and through the Fabric loop that calls its
    ``training_step`` (its ``self.log`` going to the plain Fabric's loggers, of which there are none), in
    interleaved repeats, each timed inside the run from the fetch of batch 10 to that of batch ``steps``:
    ``transformer_ratio`` (target <= 1.02), where a step costs milliseconds, not microseconds."""
    from benchmarks.compile_overhead import SEQUENCE, WIDTH

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(TRANSFORMER_BATCH * (steps + 2), SEQUENCE, WIDTH, generator=generator)
    dataset = MarkedDataset(x, x)
    runs: dict[str, Callable[[str], float]] = {
        "fabric_step_loop": lambda root: run_step_loop(dataset, steps, BlockModule, TRANSFORMER_BATCH),
        "trainer": lambda root: run_trainer(dataset, steps, root, BlockModule, TRANSFORMER_BATCH),
    }
    steady: dict[str, list[float]] = {name: [] for name in runs}
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as root:
        warnings.simplefilter("ignore")
        for run in runs.values():
            run(root)  # warm-up
        for repeat in range(repeats):
            names = list(runs) if repeat % 2 == 0 else list(runs)[::-1]
            for name in names:
                clock = dataset.on_batch = _SteadyClock(start=10, stop=steps)
                runs[name](root)
                dataset.on_batch = None
                if clock.seconds_per_step is not None:
                    steady[name].append(clock.seconds_per_step)
    medians = {name: statistics.median(values) for name, values in steady.items()}
    return {
        "transformer_fabric_step_loop_ms_per_step": medians["fabric_step_loop"] * 1e3,
        "transformer_trainer_ms_per_step": medians["trainer"] * 1e3,
        "transformer_ratio": medians["trainer"] / medians["fabric_step_loop"],
    }


# -- instructions per step (valgrind) ---------------------------------------------------------------------------
def measure_instructions(steps: int = 100, timeout: float = 1800) -> dict[str, Any]:
    """Instructions per step of the Fabric loop, fabricx's Trainer and Lightning's Trainer, and their ratios."""
    from benchmarks.instructions import ROOT, build_shim, read_dumps, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        return {"instructions": f"not available: {reason}"}
    shim = build_shim()
    folder = Path(tempfile.mkdtemp(prefix="fabricx-callgrind-trainer-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "FABRICX_CALLGRIND_SHIM": str(shim), "OMP_NUM_THREADS": "1"}
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
        f"--callgrind-out-file={folder}/rank0.out", sys.executable, "-m", "benchmarks.trainer_overhead",
        "--count-child", "--instruction-steps", str(steps),
    ]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"the run under callgrind failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
        labels = read_dumps(folder, 0)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summarize_instructions(labels, steps)


def summarize_instructions(labels: dict[str, int], steps: int) -> dict[str, Any]:
    """Per-step instructions of each side from its N- and 2N-step counts, and the ratios to the Fabric loop."""
    result: dict[str, Any] = {"instructions_steps": steps}
    per_step = {}
    sides = ("fabric_loop", "fabric_step_loop", "trainer", "trainer_without_log", "lightning_trainer",
             "lightning_trainer_without_log")
    for side in sides:
        if f"{side}-{steps}" not in labels:
            continue
        per_step[side] = (labels[f"{side}-{2 * steps}"] - labels[f"{side}-{steps}"]) / steps
        result[f"{side}_instructions_per_step"] = per_step[side]
    result["instructions_ratio"] = per_step["trainer"] / per_step["fabric_loop"]
    if "trainer_without_log" in per_step:
        result["without_log_instructions_ratio"] = per_step["trainer_without_log"] / per_step["fabric_loop"]
        # One self.log of a scalar per step: what logging it costs the Trainer, per call.
        result["log_instructions_per_call"] = per_step["trainer"] - per_step["trainer_without_log"]
    for side, key in (("trainer", "log_call_instructions"), ("lightning_trainer", "lightning_log_call_instructions")):
        if f"{side}-log-calls" in labels:
            result[key] = (labels[f"{side}-log-calls"] - labels[f"{side}-empty-calls"]) / LOG_CALLS
    if "fabric_step_loop" in per_step:
        step_loop = per_step["fabric_step_loop"]
        # The Trainer's own work: the same module code (no self.log) on both sides, only the loop differs.
        result["own_work_instructions_ratio"] = per_step["trainer_without_log"] / step_loop
        result["trainer_fixed_instructions_per_step"] = per_step["trainer"] - step_loop
        if "lightning_trainer" in per_step:
            result["lightning_trainer_fixed_instructions_per_step"] = per_step["lightning_trainer"] - step_loop
    if "lightning_trainer" in per_step:
        result["lightning_trainer_instructions_ratio"] = per_step["lightning_trainer"] / per_step["fabric_loop"]
    if "lightning_trainer_without_log" in per_step:
        result["lightning_log_instructions_per_call"] = (
            per_step["lightning_trainer"] - per_step["lightning_trainer_without_log"]
        )
    return result


class _Counter:
    """Counts from the fetch of batch ``warm`` to that of ``warm + steps`` (label ``<side>-<steps>``), then to
    that of ``warm + 3 * steps`` (label ``<side>-<2 * steps>``), through callgrind's client requests."""

    def __init__(self, shim: Any, side: str, warm: int, steps: int) -> None:
        self.shim, self.side, self.steps = shim, side, steps
        self.fetched = 0
        self.marks = {warm: None, warm + steps: steps, warm + 3 * steps: 2 * steps}

    def __call__(self) -> None:
        self.fetched += 1
        if self.fetched not in self.marks:
            return
        import gc

        ended = self.marks[self.fetched]
        if ended is not None:
            self.shim.fx_dump(f"{self.side}-{ended}".encode())
            self.shim.fx_stop()
            gc.enable()
        if ended != 2 * self.steps:
            # A collection landing in one stretch and not the other would dominate the difference.
            gc.collect()
            gc.disable()
            self.shim.fx_start()
            self.shim.fx_zero()


def _count_child(steps: int) -> None:
    """Under callgrind: a warm-up run of each side, then one counted epoch of each."""
    import ctypes
    import logging

    shim = ctypes.CDLL(os.environ["FABRICX_CALLGRIND_SHIM"])
    torch.set_num_threads(1)
    total = WARM_STEPS + 3 * steps + 2
    dataset = MarkedDataset(*_data(BATCH * (total + 1)).tensors)  # one epoch holds every counted step
    runs: dict[str, Callable[[int, str], float]] = {
        "fabric_loop": lambda n, root: run_loop(dataset, n),
        "fabric_step_loop": lambda n, root: run_step_loop(dataset, n),
        "trainer": lambda n, root: run_trainer(dataset, n, root),
        "trainer_without_log": lambda n, root: run_trainer(dataset, n, root, MLPModuleWithoutLog),
    }
    if importlib.util.find_spec("lightning") is not None:
        runs["lightning_trainer"] = lambda n, root: run_lightning_trainer(dataset, n, root)
        runs["lightning_trainer_without_log"] = lambda n, root: run_lightning_trainer(dataset, n, root, log=False)
        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as root:
        warnings.simplefilter("ignore")
        for run in runs.values():
            run(WARM_STEPS, root)
        for side, run in runs.items():
            dataset.on_batch = _Counter(shim, side, WARM_STEPS, steps)
            run(total, root)
            dataset.on_batch = None
        # One run of each Trainer more, counting self.log calls directly (not part of the per-step counts above).
        run_trainer(dataset, WARM_STEPS + 2, root, _counting(MLPModule, _CallCounter(shim, "trainer")))
        if "lightning_trainer" in runs:
            run_lightning_trainer(dataset, WARM_STEPS + 2, root, count_calls=_CallCounter(shim, "lightning_trainer"))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--instruction-steps", type=int, default=0, help="also count instructions (valgrind)")
    parser.add_argument("--count-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count_child:
        _count_child(args.instruction_steps)
        return
    print(json.dumps(measure(args.steps, args.repeats, args.instruction_steps), indent=2))


if __name__ == "__main__":
    main()
