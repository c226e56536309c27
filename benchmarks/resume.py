"""Time from process start to the first resumed batch, stopped at 10%, 50% and 90% of an epoch.

The epoch has 200k samples whose ``__getitem__`` sleeps 1 ms. fabricx restores the loader's saved
position (sampler state only, no sample is loaded to get there); the naive approach, what a plain
PyTorch loop does, iterates the loader from the start and discards the first k batches. Each point
is a fresh interpreter; the clock starts just before the process is created and stops when the
child has the first resumed batch in hand. The naive baseline is measured fully at 10% and at 0%
(process start and the first batch only) and extrapolated linearly to 50% and 90% (marked
"extrapolated"), which keeps the whole run under two minutes.

Run: ``python -m benchmarks.resume [--samples 200000] [--batch-size 32]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

STOPS = (0.1, 0.5, 0.9)
SEED = 0


class SlowDataset(Dataset):
    """``length`` samples; loading one takes ``delay`` seconds (1 ms by default)."""

    def __init__(self, length: int, delay: float = 0.001) -> None:
        self.length = length
        self.delay = delay

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if self.delay:
            time.sleep(self.delay)
        return index


def _loader(samples: int, batch_size: int, delay: float) -> DataLoader:
    generator = torch.Generator().manual_seed(SEED)
    return DataLoader(SlowDataset(samples, delay), batch_size=batch_size, shuffle=True, generator=generator)


def _make_checkpoint(path: Path, samples: int, batch_size: int, batches: int) -> list[int]:
    """Consume ``batches`` batches (without the loading delay: the position does not depend on it), save."""
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    loader = fabric.setup_dataloaders(_loader(samples, batch_size, delay=0.0))
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    fabric.save(path, {"loader": loader})
    return next(iterator).tolist()  # what the resumed run must hand out first


def _child(mode: str, samples: int, batch_size: int, skip: int, checkpoint: str) -> None:
    if mode == "fabricx":
        from fabricx import Fabric

        fabric = Fabric(accelerator="cpu", devices=1)
        loader = fabric.setup_dataloaders(_loader(samples, batch_size, delay=0.001))
        fabric.load(checkpoint, {"loader": loader})
        batch = next(iter(loader))
    else:
        iterator = iter(_loader(samples, batch_size, delay=0.001))
        for _ in range(skip):
            next(iterator)
        batch = next(iterator)
    print(json.dumps({"time": time.time(), "first": batch.tolist()}), flush=True)


def _time_child(mode: str, samples: int, batch_size: int, skip: int, checkpoint: str) -> tuple[float, list[int]]:
    start = time.time()
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.resume",
            "--child",
            mode,
            "--samples",
            str(samples),
            "--batch-size",
            str(batch_size),
            "--skip",
            str(skip),
            "--checkpoint",
            checkpoint,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    report = json.loads(process.stdout.strip().splitlines()[-1])
    return report["time"] - start, report["first"]


def measure(samples: int = 200_000, batch_size: int = 32) -> dict:
    """Seconds from process start to the first resumed batch, per stop position, for both approaches."""
    batches_per_epoch = samples // batch_size
    results: dict = {"samples": samples, "batch_size": batch_size, "sample_load_ms": 1.0}
    with tempfile.TemporaryDirectory() as tmp:
        fabricx_times = {}
        for stop in STOPS:
            skip = int(batches_per_epoch * stop)
            checkpoint = str(Path(tmp) / f"stop_{int(stop * 100)}")
            expected = _make_checkpoint(Path(checkpoint), samples, batch_size, skip)
            seconds, first = _time_child("fabricx", samples, batch_size, skip, checkpoint)
            if first != expected:
                raise RuntimeError(f"fabricx resumed at {first[:4]}..., expected {expected[:4]}...")
            fabricx_times[stop] = seconds
        naive_zero, _ = _time_child("naive", samples, batch_size, 0, "")
        # (torch's RandomSampler shuffles differently from torchdata's, so the batches are not compared)
        naive_ten, _ = _time_child("naive", samples, batch_size, int(batches_per_epoch * 0.1), "")
    per_tenth = naive_ten - naive_zero
    for stop in STOPS:
        key = f"stop_{int(stop * 100)}"
        naive = naive_ten if stop == 0.1 else naive_zero + per_tenth * stop / 0.1
        results[key] = {
            "fabricx_s": round(fabricx_times[stop], 3),
            "naive_s": round(naive, 3),
            "naive_measured": stop == 0.1,
            "ratio": round(fabricx_times[stop] / naive, 4),
        }
    results["naive_start_only_s"] = round(naive_zero, 3)
    results["fabricx_spread_s"] = round(max(fabricx_times.values()) - min(fabricx_times.values()), 3)
    return results


def _print(results: dict) -> None:
    print(
        f"Resume a {results['samples']:,}-sample epoch (1 ms per sample, batch {results['batch_size']}): "
        "seconds from process start to the first resumed batch"
    )
    print(f"{'stop at':>8} {'fabricx':>9} {'naive skip':>11}  note")
    for stop in STOPS:
        row = results[f"stop_{int(stop * 100)}"]
        note = "measured" if row["naive_measured"] else "naive extrapolated linearly from the 0% and 10% runs"
        print(f"{int(stop * 100):>7}% {row['fabricx_s']:>9.2f} {row['naive_s']:>11.2f}  {note}")
    print(f"process start and first batch without any skipping (naive at 0%): {results['naive_start_only_s']:.2f} s")
    print(f"fabricx spread across stop positions: {results['fabricx_spread_s']:.2f} s (flat = independent of k)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--child", choices=("fabricx", "naive"), help=argparse.SUPPRESS)
    parser.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.samples, args.batch_size, args.skip, args.checkpoint)
        return
    _print(measure(samples=args.samples, batch_size=args.batch_size))


if __name__ == "__main__":
    main()
