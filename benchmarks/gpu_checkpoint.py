"""Blocked time of a checkpoint of GPT-2 small's model + AdamW state on the GPU (~1.5 GB): fabricx's synchronous and
asynchronous saves against ``torch.save`` (+ fsync) and ``torch.distributed.checkpoint.async_save``.

"Blocked" is how long the training loop cannot go on: for ``torch.save`` and a synchronous ``fabric.save``
the whole call; for ``dcp.async_save`` the call (it stages the state to host memory before returning);
for ``fabric.save(..., async_save=True)`` the call plus how long the next ``optimizer.step()`` waits for the
deferred copy of parameters and optimizer state (``handle.step_wait_s``), with a forward and backward in
between as in training. Each also reports the time until the checkpoint is complete on disk. Saves take
turns over the repeats; medians.

Run: ``python -m benchmarks.gpu_checkpoint [--dry-run]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpt import GPT, TINY, GPTConfig, fused_adamw, token_batches


def _fsync_tree(path: Path) -> None:
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        with open(file, "rb") as handle:
            os.fsync(handle.fileno())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _dcp_async_save() -> Any:
    """``dcp.async_save`` callable without a process group: ``no_dist=True`` where this torch has it, else a
    one-process gloo group."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    parameters = inspect.signature(dcp.async_save).parameters
    if "no_dist" in parameters:
        return lambda state, path: dcp.async_save(state, checkpoint_id=str(path), no_dist=True)
    if not dist.is_initialized():
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    return lambda state, path: dcp.async_save(state, checkpoint_id=str(path))


def measure(dry_run: bool = False, repeats: int = 3, root: str | None = None) -> dict[str, Any]:
    from fabricx import Fabric

    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    config = TINY if dry_run else GPTConfig()
    repeats = 1 if dry_run else repeats
    fabric = Fabric(accelerator=device.type, devices=1, precision="bf16-mixed")
    torch.manual_seed(0)
    model = GPT(config).to(device)
    model, optimizer = fabric.setup(model, fused_adamw(model))
    (x, y), = token_batches(config, 2 if dry_run else 8, 1, device)

    def train_step() -> None:
        fabric.backward(model(x, y))
        optimizer.step()
        optimizer.zero_grad()

    train_step()  # AdamW's moments exist: the state is 3x the weights
    plain_state = lambda: {"model": model.state_dict(), "optimizer": optimizer.state_dict()}  # noqa: E731
    moments = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    state_bytes = sum(t.numel() * t.element_size() for t in [*model.state_dict().values(), *moments])
    async_save = _dcp_async_save()
    folder = Path(tempfile.mkdtemp(prefix="fabricx-gpu-ckpt-", dir=root))
    counter = iter(range(10**6))
    blocked: dict[str, list[float]] = {k: [] for k in ("torch_save", "torch_save_fsync", "dcp_async", "sync", "async")}
    complete: dict[str, list[float]] = {k: [] for k in blocked}

    def fresh() -> Path:
        for old in folder.iterdir():
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
        return folder / f"ckpt_{next(counter)}"

    def torch_save(durable: bool) -> tuple[float, float]:
        target = fresh().with_suffix(".pt")
        _sync(device)
        start = time.perf_counter()
        torch.save(plain_state(), target)
        if durable:
            _fsync_tree(target)
        seconds = time.perf_counter() - start
        return seconds, seconds

    def dcp_async() -> tuple[float, float]:
        target = fresh()
        _sync(device)
        start = time.perf_counter()
        future = async_save(plain_state(), target)
        call = time.perf_counter() - start
        train_step()
        future.result()
        _fsync_tree(target)
        return call, time.perf_counter() - start

    def fabricx_sync() -> tuple[float, float]:
        target = fresh()
        _sync(device)
        start = time.perf_counter()
        fabric.save(target, {"model": model, "optimizer": optimizer})
        seconds = time.perf_counter() - start
        return seconds, seconds

    def fabricx_async() -> tuple[float, float]:
        target = fresh()
        _sync(device)
        start = time.perf_counter()
        handle = fabric.save(target, {"model": model, "optimizer": optimizer}, async_save=True)
        call = time.perf_counter() - start
        assert handle is not None
        train_step()  # forward/backward overlap the deferred copy; its optimizer.step() waits for it
        handle.wait()
        return call + handle.step_wait_s, time.perf_counter() - start

    saves = {
        "torch_save": lambda: torch_save(False), "torch_save_fsync": lambda: torch_save(True),
        "dcp_async": dcp_async, "sync": fabricx_sync, "async": fabricx_async,
    }
    try:
        for save in saves.values():
            save()  # warm-up: imports, staging buffers, the files' first allocation
        for repeat in range(repeats):
            names = list(saves)
            names = names[repeat % len(names):] + names[: repeat % len(names)]
            for name in names:
                blocked_s, complete_s = saves[name]()
                blocked[name].append(blocked_s)
                complete[name].append(complete_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    labels = {
        "torch_save": "torch.save", "torch_save_fsync": "torch.save + fsync",
        "dcp_async": "torch.distributed.checkpoint.async_save", "sync": "fabricx save",
        "async": "fabricx save(async_save=True)",
    }
    base = statistics.median(blocked["torch_save_fsync"])
    rows = [
        {
            "save": labels[name], "key": name, "blocked_s": statistics.median(blocked[name]),
            "complete_s": statistics.median(complete[name]),
            "blocked_ratio": statistics.median(blocked[name]) / base,
        }
        for name in saves
    ]
    return {"device": str(device), "state_mb": state_bytes / 1e6, "repeats": repeats, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.dry_run, args.repeats), indent=2))


if __name__ == "__main__":
    main()
