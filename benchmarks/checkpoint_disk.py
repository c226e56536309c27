"""Durable save and cold load of a 600 MB model checkpoint as fractions of what this machine's disk does with the
same bytes, measured in the same run (targets: save >= 0.8, load >= 0.8).

The disk's limit: the checkpoint's tensor bytes written as one buffer with one ``write`` and an
``fsync`` (``disk_save_s``), and read back with one ``readinto`` into a preallocated buffer after the
file's pages were dropped from the page cache (``disk_load_s``). fabricx: ``fabric.save`` of the model
(durable when it returns: its files are fsynced and the directory renamed into place) and
``fabric.load`` into the model after dropping the checkpoint's pages the same way. ``save_fraction``
and ``load_fraction`` are the disk's time over fabricx's (1.0: as fast as the disk allows);
``save_ratio``/``load_ratio`` are their inverses (time, lower is better). ``warm_load_s`` is a load
right after another, from the page cache, to show that the cold loads were cold. ``disk_load_fresh_s`` is the
disk's read into a freshly allocated buffer (what any load into new memory pays: the kernel maps and zeroes each
page on first touch); ``load_fraction_of_fresh`` compares fabricx to it. ``peak_extra_save_mb`` and
``peak_extra_load_mb``: the most resident memory a save and a cold load add beyond what the process held before
(sampled every 2 ms; the model itself is already resident).

Pages are dropped per file with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after an fsync (our files only;
``page_cache`` says which method was used); ``--drop-caches global`` writes 3 to
``/proc/sys/vm/drop_caches`` instead where permitted (root), which empties the cache of the whole machine.

Run: ``python -m benchmarks.checkpoint_disk [--megabytes 600 --repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.checkpoint_io import model_of_size, peak_rss


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def drop_pages(path: Path, method: str) -> str:
    """Evict ``path``'s pages (a file or every file below a folder) from the page cache; returns the method used."""
    if method == "global":
        try:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            return "drop_caches"
        except OSError:
            pass  # not root, or a read-only /proc/sys: fall back to our own files
    if not hasattr(os, "posix_fadvise"):
        return "none (no posix_fadvise on this system)"
    for file in _files(path):
        descriptor = os.open(file, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # only clean pages can be dropped
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    return "posix_fadvise(DONTNEED)"


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(megabytes: float = 600, repeats: int = 3, drop_caches: str = "file") -> dict[str, Any]:
    from fabricx import Fabric

    torch.manual_seed(0)
    model = model_of_size(megabytes)
    state = model.state_dict()
    raw = b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in state.values())
    fabric = Fabric(accelerator="cpu")
    fabric_model = fabric.setup_module(model)
    root = Path(tempfile.mkdtemp(prefix="fabricx-disk-"))
    disk_file, checkpoint = root / "limit.bin", root / "ckpt"
    into = bytearray(len(raw))
    methods: set[str] = set()
    samples: dict[str, list[float]] = {
        k: [] for k in ("disk_save", "disk_load", "disk_load_fresh", "save", "load", "warm_load")
    }
    peaks: dict[str, list[int]] = {"save": [], "load": []}

    def disk_save() -> None:
        with open(disk_file, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())

    def disk_load() -> None:
        with open(disk_file, "rb", buffering=0) as handle:
            assert handle.readinto(into) == len(raw)

    def disk_load_fresh() -> None:
        with open(disk_file, "rb", buffering=0) as handle:
            assert handle.readinto(bytearray(len(raw))) == len(raw)

    def measured(name: str, fn: Any) -> None:
        peak: dict[str, int] = {}
        with peak_rss(peak):
            samples[name].append(_timed(fn))
        peaks[name].append(peak["extra"])

    def fabricx_save() -> None:
        shutil.rmtree(checkpoint, ignore_errors=True)
        fabric.save(checkpoint, {"model": fabric_model})

    def fabricx_load() -> None:
        fabric.load(checkpoint, {"model": fabric_model})

    try:
        disk_save()
        fabricx_save()
        fabricx_load()  # warm-up: imports and first-use costs
        for repeat in range(repeats):
            order = ("disk", "fabricx") if repeat % 2 == 0 else ("fabricx", "disk")
            for name in order:
                if name == "disk":
                    samples["disk_save"].append(_timed(disk_save))
                    methods.add(drop_pages(disk_file, drop_caches))
                    samples["disk_load"].append(_timed(disk_load))
                    methods.add(drop_pages(disk_file, drop_caches))
                    samples["disk_load_fresh"].append(_timed(disk_load_fresh))
                else:
                    measured("save", fabricx_save)
                    methods.add(drop_pages(checkpoint, drop_caches))
                    measured("load", fabricx_load)
                    samples["warm_load"].append(_timed(fabricx_load))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = {name: statistics.median(values) for name, values in samples.items()}
    result: dict[str, Any] = {"state_mb": len(raw) / 1e6, "page_cache": ", ".join(sorted(methods))}
    result.update({f"{name}_s": value for name, value in seconds.items()})
    result["disk_write_mb_per_s"] = len(raw) / 1e6 / seconds["disk_save"]
    result["disk_read_mb_per_s"] = len(raw) / 1e6 / seconds["disk_load"]
    result["save_fraction"] = seconds["disk_save"] / seconds["save"]
    result["load_fraction"] = seconds["disk_load"] / seconds["load"]
    result["load_fraction_of_fresh"] = seconds["disk_load_fresh"] / seconds["load"]
    result["peak_extra_save_mb"] = max(peaks["save"]) / 1e6
    result["peak_extra_load_mb"] = max(peaks["load"]) / 1e6
    result["save_ratio"] = seconds["save"] / seconds["disk_save"]
    result["load_ratio"] = seconds["load"] / seconds["disk_load"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drop-caches", choices=("file", "global"), default="file")
    args = parser.parse_args()
    print(json.dumps(measure(args.megabytes, args.repeats, args.drop_caches), indent=2))


if __name__ == "__main__":
    main()
