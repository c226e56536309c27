"""Exit soak: start small 2-process jobs many times and count the runs that did not exit 0.

A job that finished its work but aborted while the interpreter shut down (a gloo worker thread
releasing finished work during finalization) looks failed to a scheduler. Each job trains a few DDP
steps with a backward right before the end, then ends normally:

* ``fabricx``: ``Fabric(devices=2, strategy="ddp")``, the script re-run per rank, no teardown call;
* ``accelerate``: the Accelerate adapter under ``fabricx run`` (torchrun), ending with ``end_training()``;
* ``spawn``: ``strategy="ddp_spawn"`` with ``fabric.launch(train)``.

Every rank must also print that it finished, so a job that exits 0 early is counted as failed too.

Run: ``python -m benchmarks.exit_soak [--count 50] [--kind fabricx accelerate spawn]``
(prints ``KIND: N of COUNT runs failed``; exits 1 if any run failed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOBS: dict[str, str] = {
    "fabricx": textwrap.dedent(
        """
        import torch
        from fabricx import Fabric
        from fabricx.strategies import DDPStrategy

        torch.set_num_threads(1)
        fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60))
        fabric.launch()
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(3):
            optimizer.zero_grad()
            fabric.backward(model(torch.randn(8, 16)).square().mean())
            optimizer.step()
        fabric.backward(model(torch.randn(8, 16)).square().mean())  # the last thing before the end
        print(f"finished rank {fabric.global_rank}", flush=True)
        """
    ),
    "accelerate": textwrap.dedent(
        """
        import torch
        from fabricx.compat.accelerate import Accelerator

        torch.set_num_threads(1)
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        for _ in range(3):
            optimizer.zero_grad()
            accelerator.backward(model(torch.randn(8, 16)).square().mean())
            optimizer.step()
        accelerator.backward(model(torch.randn(8, 16)).square().mean())
        accelerator.end_training()
        print(f"finished rank {accelerator.process_index}", flush=True)
        """
    ),
    "spawn": textwrap.dedent(
        """
        import torch
        from fabricx import Fabric
        from fabricx.strategies import DDPStrategy


        def train(fabric):
            torch.set_num_threads(1)
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
            model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
            for _ in range(3):
                optimizer.zero_grad()
                fabric.backward(model(torch.randn(8, 16)).square().mean())
                optimizer.step()
            fabric.backward(model(torch.randn(8, 16)).square().mean())
            print(f"finished rank {fabric.global_rank}", flush=True)


        if __name__ == "__main__":
            Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn", timeout=60)).launch(train)
        """
    ),
}


def _command(kind: str, script: Path) -> list[str]:
    if kind == "accelerate":
        return [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", "2", str(script)]
    return [sys.executable, str(script)]


def run_once(kind: str, folder: Path, timeout: float = 180.0) -> tuple[int, str]:
    """Start job ``kind`` once; return its exit code (``-1`` if a rank did not finish) and its output's tail.

    Example::

        code, tail = run_once("fabricx", Path("/tmp/soak"))
    """
    script = folder / f"{kind}_job.py"
    if not script.exists():
        script.write_text(JOBS[kind])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        result = subprocess.run(
            _command(kind, script), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        return -2, f"timed out after {timeout} s: {error.stdout!r:.500}"
    output = result.stdout + result.stderr
    code = result.returncode
    if code == 0 and not all(f"finished rank {rank}" in result.stdout for rank in (0, 1)):
        code = -1
    return code, output[-1500:]


def soak(kind: str, count: int, verbose: bool = True) -> dict:
    """Run job ``kind`` ``count`` times; return the failures with their exit codes and output.

    Example::

        soak("fabricx", 5)["failed"]  # 0
    """
    failures: list[tuple[int, int, str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"fabricx-soak-{kind}-") as tmp:
        for index in range(count):
            code, tail = run_once(kind, Path(tmp))
            if code != 0:
                failures.append((index, code, tail))
            if verbose:
                print(f"{kind} run {index + 1}/{count}: exit {code}", flush=True)
    return {
        "kind": kind,
        "count": count,
        "failed": len(failures),
        "codes": [code for _, code, _ in failures],
        "failures": failures,
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--kind", nargs="+", choices=sorted(JOBS), default=["fabricx", "accelerate"])
    parser.add_argument("--quiet", action="store_true", help="print only the summary lines")
    options = parser.parse_args(argv)
    results = [soak(kind, options.count, verbose=not options.quiet) for kind in options.kind]
    for result in results:
        for index, code, tail in result["failures"][:3]:
            print(f"--- {result['kind']} run {index + 1} exited {code}:\n{tail}")
    for result in results:
        print(
            f"{result['kind']}: {result['failed']} of {result['count']} runs failed "
            f"(exit codes {result['codes']}; {result['seconds']:.0f} s)"
        )
    return 1 if any(result["failed"] for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
