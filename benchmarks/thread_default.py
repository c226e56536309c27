"""Wall time of an example trained by 2 CPU processes on one machine, with fabricx's thread default (each local
process ``cores // processes`` intra-op threads) and without it (``OMP_NUM_THREADS`` set to the core count: what
torch gives every process on its own, and what fabricx leaves alone when the user set it).

The example is ``examples/char_gpt.py --devices 2 --strategy ddp`` (a small GPT, 2 layers of width 64), trained
for ``steps`` steps without checkpoints, from the command to its exit; the two settings take turns over the
repeats; medians. ``ratio`` is the time with the default over the time without it (lower is better).

Run: ``python -m benchmarks.thread_default [--steps 40 --repeats 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.run_all import ROOT


def _run_example(steps: int, threads: int | None) -> float:
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as root:
        command = [
            sys.executable, str(ROOT / "examples" / "char_gpt.py"), "--accelerator", "cpu", "--devices", "2",
            "--strategy", "ddp", "--max-steps", str(steps), "--save-every", "0", "--root-dir", root,
            "--text-bytes", "200000",
        ]
        start = time.perf_counter()
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=900)
        return time.perf_counter() - start


def measure(steps: int = 40, repeats: int = 2) -> dict[str, Any]:
    """Median seconds of the example with the thread default and with every process given all cores."""
    cores = os.cpu_count() or 1
    samples: dict[str, list[float]] = {"default": [], "all_cores": []}
    for repeat in range(repeats):
        order = ("default", "all_cores") if repeat % 2 == 0 else ("all_cores", "default")
        for name in order:
            samples[name].append(_run_example(steps, None if name == "default" else cores))
    default, all_cores = (statistics.median(samples[name]) for name in ("default", "all_cores"))
    return {
        "cores": cores,
        "threads_per_process_default": max(1, cores // 2),
        "default_s": default,
        "all_cores_s": all_cores,
        "ratio": default / all_cores,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats), indent=2))


if __name__ == "__main__":
    main()
