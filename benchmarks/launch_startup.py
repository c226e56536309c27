"""Time from the command to the first optimizer step of a 2-process CPU training script, by launcher: ``fabricx
run`` against ``torchrun`` with a hand-written loop (target <= 1.1x), beside Lightning's ``fabric run`` and
``accelerate launch``.

Each launcher starts the script written for it (the same model, data and step: a Fabric loop under
``fabricx run`` and Lightning's CLI, ``init_process_group`` + DDP under ``torchrun``, an
``Accelerator`` under ``accelerate launch``) as a fresh command. The clock starts just before the command
is created; each rank prints the wall-clock time its first ``optimizer.step()`` returned, and the
figure is the later of the two ranks. Launchers take turns over the repeats; medians. Lightning 2.6.6
has no ``lightning run model``: its CLI is ``fabric run`` (``python -m lightning.fabric.cli``).
``accelerate launch --cpu --num_processes 2`` starts a single process in accelerate 1.15 (several CPU
processes need mpirun), so Accelerate runs as ``accelerate launch --multi_gpu --num_processes 2`` with
``Accelerator(cpu=True)`` in the script: two processes through torchrun, on the CPU.

Run: ``python -m benchmarks.launch_startup [--repeats 3]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import free_port
from benchmarks.run_all import ROOT

_PRELUDE = """
import os, time, torch
def _stamp():  # one file per rank: the ranks' stdout lines would interleave
    with open(os.path.join(os.environ["FIRST_STEP_DIR"], f"{os.getpid()}.txt"), "w") as handle:
        handle.write(repr(time.time()))
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
"""
_FABRIC = """
from {package} import Fabric
fabric = Fabric()  # accelerator, devices and strategy come from the launcher's flags (no launch(): it ran)
model, optimizer = fabric.setup(model, optimizer)
loader = fabric.setup_dataloaders(DataLoader(data, batch_size=32, shuffle=True))
x, y = next(iter(loader))
fabric.backward(nn.functional.mse_loss(model(x), y))
optimizer.step()
_stamp()
"""
_TORCHRUN = """
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
dist.init_process_group("gloo")
model = DistributedDataParallel(model)
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=32, sampler=sampler)
x, y = next(iter(loader))
nn.functional.mse_loss(model(x), y).backward()
optimizer.step()
_stamp()
dist.destroy_process_group()
"""
_ACCELERATE = """
from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=32, shuffle=True))
x, y = next(iter(loader))
accelerator.backward(nn.functional.mse_loss(model(x), y))
optimizer.step()
_stamp()
"""


def commands(folder: Path, port: int) -> dict[str, list[str]]:
    """The command of each launcher that is installed, its script written into ``folder``."""
    python = sys.executable
    scripts = {
        "fabricx": _PRELUDE + _FABRIC.format(package="fabricx"),
        "torchrun": _PRELUDE + _TORCHRUN,
        "lightning": _PRELUDE + _FABRIC.format(package="lightning.fabric"),
        "accelerate": _PRELUDE + _ACCELERATE,
    }
    for name, source in scripts.items():  # (train_*: a script named fabricx.py would shadow the package)
        (folder / f"train_{name}.py").write_text(source)
    fabric_flags = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"]
    found = {
        "fabricx": [python, "-m", "fabricx", "run", *fabric_flags, "--main-port", str(port),
                    str(folder / "train_fabricx.py")],
        "torchrun": [python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port + 1),
                     str(folder / "train_torchrun.py")],
    }
    if importlib.util.find_spec("lightning") is not None:
        found["lightning"] = [python, "-m", "lightning.fabric.cli", *fabric_flags, "--main-port", str(port + 2),
                              str(folder / "train_lightning.py")]
    if importlib.util.find_spec("accelerate") is not None:
        # `accelerate launch --cpu` starts one process in accelerate 1.15 (its simple launcher; several CPU
        # processes need mpirun): `--multi_gpu` starts two through torchrun, Accelerator(cpu=True) keeps them on CPU.
        found["accelerate"] = [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                               "--main_process_port", str(port + 3), str(folder / "train_accelerate.py")]
    return found


def time_to_first_step(command: list[str], timeout: float = 240) -> float:
    """Seconds from creating the command to the later rank's first optimizer step."""
    with tempfile.TemporaryDirectory(prefix="fabricx-first-step-") as stamps_dir:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "FIRST_STEP_DIR": stamps_dir}
        env.setdefault("OMP_NUM_THREADS", "1")
        start = time.time()
        process = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        stamps = [float(path.read_text()) for path in Path(stamps_dir).glob("*.txt")]
    if process.returncode != 0 or len(stamps) != 2:
        tail = " | ".join((process.stderr or process.stdout).strip().splitlines()[-6:])
        raise RuntimeError(f"{command[2:4]} exited {process.returncode} with {len(stamps)} first steps: {tail}")
    return max(stamps) - start


def measure(repeats: int = 3) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="fabricx-launch-") as folder:
        found = commands(Path(folder), free_port())
        for command in found.values():
            time_to_first_step(command)  # warm the file cache with each launcher's imports
        seconds: dict[str, list[float]] = {name: [] for name in found}
        for repeat in range(repeats):
            names = list(found)
            for name in names[repeat % len(names):] + names[: repeat % len(names)]:
                seconds[name].append(time_to_first_step(found[name]))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {f"{name}_s": value for name, value in medians.items()}
    result["ratio"] = medians["fabricx"] / medians["torchrun"]
    for peer in ("lightning", "accelerate"):
        if peer in medians:
            result[f"{peer}_ratio"] = medians[peer] / medians["torchrun"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats), indent=2))


if __name__ == "__main__":
    main()
