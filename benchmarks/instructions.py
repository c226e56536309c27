"""Instructions per optimizer step, counted by valgrind (callgrind): fabricx against the hand-written loop, a unit
that a busy machine does not move.

Wall-clock ratios on a shared 2-core machine swing by several per cent (the A/A control of the DDP
benchmark reads 0.97-1.04), and they cannot show a 2 % overhead. Instructions executed are the same on a
busy machine and an idle one. Each rank runs under ``valgrind --tool=callgrind --instr-atstart=no``:
imports and set-up run uninstrumented; around each measured stretch of steps the process switches
instrumentation on and asks for a dump (callgrind's client requests, through a 10-line C shim built at
first use). Every loop of :mod:`benchmarks.loop_overhead` (plain, accumulation 4, clipping) is measured
over N and over 2N optimizer steps from the same starting point; the difference over N is the cost of one
step with the fixed costs (starting an epoch's iterator, the first step's allocations) subtracted. The
garbage collector is run before and paused during each count (a collection landing in one stretch and not
the other would otherwise dominate the difference). With
2 processes each rank is counted (``rank0``, ``rank1``): both step in lockstep through the all-reduce,
and only the main thread is counted (see `read_dumps`).

Without valgrind, or without a C compiler and valgrind's headers for the shim, the result says
``"not available"`` and why.

Run: ``python -m benchmarks.instructions [--world 1|2] [--steps 20]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import free_port

ROOT = Path(__file__).resolve().parent.parent
SHIM_SOURCE = r"""
#include <valgrind/callgrind.h>
void fx_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void fx_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void fx_zero(void) { CALLGRIND_ZERO_STATS; }
void fx_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
int fx_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""
SIDES = ("plain", "fabricx")


def unavailable_reason() -> str | None:
    """Why instructions cannot be counted here, or None when they can."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (Debian: apt-get install valgrind)"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler for the callgrind client-request shim"
    if not any(Path(p, "valgrind", "callgrind.h").exists() for p in ("/usr/include", "/usr/local/include")):
        return "valgrind's headers (valgrind/callgrind.h) are missing"
    return None


def build_shim() -> Path:
    """The client-request shim, compiled once into .cache/ (a shared library of five functions)."""
    target = ROOT / ".cache" / "fabricx-callgrind-shim.so"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        source = target.with_suffix(".c")
        source.write_text(SHIM_SOURCE)
        compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(target), str(source)], check=True)
    return target


def measure_instructions(world: int = 1, steps: int = 20, timeout: float = 900) -> dict[str, Any]:
    """Instructions per optimizer step of each loop and side (per rank with ``world=2``) and fabricx's ratios."""
    reason = unavailable_reason()
    if reason is not None:
        return {"instructions": f"not available: {reason}"}
    shim = build_shim()
    folder = Path(tempfile.mkdtemp(prefix="fabricx-callgrind-"))
    port = free_port()
    processes = []
    try:
        for rank in range(world):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                   "FABRICX_CALLGRIND_SHIM": str(shim), "OMP_NUM_THREADS": "1"}
            if world > 1:
                env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
                            "RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world),
                            "GROUP_RANK": "0", "NODE_RANK": "0"})
            command = [
                "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no", "--separate-threads=yes",
                f"--callgrind-out-file={folder}/rank{rank}.out", sys.executable, "-m", "benchmarks.instructions",
                "--child", "--world", str(world), "--steps", str(steps),
            ]
            processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
        outputs = [process.communicate(timeout=timeout) for process in processes]
        for process, (_, err) in zip(processes, outputs, strict=True):
            if process.returncode != 0:
                raise RuntimeError(f"a rank under callgrind failed ({process.returncode}): {err.strip()[-1500:]}")
        counts = [read_dumps(folder, rank) for rank in range(world)]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        shutil.rmtree(folder, ignore_errors=True)
    return summarize(counts, steps)


def read_dumps(folder: Path, rank: int) -> dict[str, int]:
    """{dump label: instructions of the main thread} from callgrind's dump files of one rank.

    Only the main thread, where the training loop (and all of fabricx's code) runs: with 2 processes,
    gloo's own threads poll while a rank waits for the other, and how long that takes depends on how the
    two processes are scheduled (counting them moved the same ratio by 5-10 % between runs on a busy
    machine). Their work for the collective itself is the same for both loops.
    """
    found: dict[str, int] = {}
    for path in folder.glob(f"rank{rank}.out*"):
        text = path.read_text(errors="replace")
        thread = re.search(r"^thread: (\d+)", text, re.MULTILINE)
        if thread is not None and thread.group(1) != "1":
            continue
        label = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.MULTILINE)
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
        if label and total:
            found[label.group(1)] = int(total.group(1))
    return found


def summarize(counts: list[dict[str, int]], steps: int) -> dict[str, Any]:
    from benchmarks.loop_overhead import VARIANTS

    result: dict[str, Any] = {"instructions_steps": steps}
    for rank, labels in enumerate(counts):
        prefix = "" if len(counts) == 1 else f"rank{rank}_"
        for variant in VARIANTS:
            per_step = {}
            for side in SIDES:
                short, long = labels[f"{variant}-{side}-{steps}"], labels[f"{variant}-{side}-{2 * steps}"]
                per_step[side] = (long - short) / steps
                result[f"{prefix}{variant}_{side}_instructions_per_step"] = per_step[side]
            key = "instructions_ratio" if variant == "plain" else f"{variant}_instructions_ratio"
            result[f"{prefix}{key}"] = per_step["fabricx"] / per_step["plain"]
    return result


def _child(world: int, steps: int) -> None:
    """One rank: set up both sides of every loop, then count N and 2N steps of each."""
    import ctypes
    import gc

    import torch

    from benchmarks.common import tiny_data, tiny_mlp
    from benchmarks.loop_overhead import ACCUMULATION, VARIANTS, as_dataset, fabric_steps, plain_steps, shuffled_loader
    from fabricx import Fabric

    shim = ctypes.CDLL(os.environ["FABRICX_CALLGRIND_SHIM"])
    torch.set_num_threads(1)
    epoch = 2 * steps + 2  # optimizer steps per epoch: room for the longest stretch and a warm-up step
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        from torch.utils.data import DistributedSampler

        from fabricx.strategies import DDPStrategy

        fabric = Fabric(accelerator="cpu", devices=world, strategy=DDPStrategy(timeout=600),
                        grad_accum_steps=ACCUMULATION)
        fabric.launch()
    makers: dict[tuple[str, str], Any] = {}
    for variant in VARIANTS:
        batches = epoch * (ACCUMULATION if variant == "accumulation" else 1)
        dataset = as_dataset(tiny_data(batches * world))
        torch.manual_seed(0)
        if world > 1:
            plain_model: torch.nn.Module = DistributedDataParallel(tiny_mlp())
            sampler = DistributedSampler(dataset, num_replicas=world, rank=fabric.global_rank, shuffle=True, seed=0)
            plain_data = shuffled_loader(dataset, sampler=sampler)
        else:
            plain_model = tiny_mlp()
            plain_data = shuffled_loader(dataset)
            fabric = Fabric(accelerator="cpu", grad_accum_steps=ACCUMULATION if variant == "accumulation" else 1)
        plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
        torch.manual_seed(0)
        model = tiny_mlp()
        fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        fabric_data = fabric.setup_dataloaders(shuffled_loader(dataset))
        makers[(variant, "plain")] = lambda v=variant, m=plain_model, o=plain_optimizer, d=plain_data: plain_steps(
            v, m, o, d, []
        )
        makers[(variant, "fabricx")] = lambda v=variant, f=fabric, m=fabric_model, o=fabric_optimizer, d=fabric_data: (
            fabric_steps(v, f, m, o, d, [])
        )
    barrier = fabric.barrier if world > 1 else (lambda: None)
    for (variant, side), make in makers.items():
        for count in (None, steps, 2 * steps):  # None: a warm-up epoch, not counted
            iterator = make()
            next(iterator)  # the first step of an epoch (iterator start-up) is outside every count
            barrier()
            if count is not None:
                # The cyclic garbage collector runs when allocations pass a threshold, in whichever stretch that
                # happens: collected before and paused during each count, so N and 2N differ by N steps only.
                gc.collect()
                gc.disable()
                shim.fx_start()
                shim.fx_zero()
            for _ in range(count or 2 * steps):
                next(iterator)
            if count is not None:
                shim.fx_dump(f"{variant}-{side}-{count}".encode())
                shim.fx_stop()
                gc.enable()
            for _ in iterator:  # finish the epoch, so every side starts the next one alike
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=1, choices=(1, 2))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.world, args.steps)
        return
    print(json.dumps(measure_instructions(args.world, args.steps), indent=2))


if __name__ == "__main__":
    main()
