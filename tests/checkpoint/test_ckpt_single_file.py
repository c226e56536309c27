"""The single-file layout: ``fabric.save("x.pth", state)`` writes ONE torch zip file.

It reads with ``torch.load(weights_only=True)`` and Lightning's ``Fabric.load``; fabricx reads it (and plain
``torch.save`` / Lightning files) code-free; a crafted pickle is refused; what a weights-only file cannot hold
is refused naming the entry; a SIGKILL while saving over a file leaves the old file or the new one; resuming
through a file is exact (loader position, RNG), on one process and per rank on two (DDP, FSDP2 full state).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import socket
import subprocess
import sys
import textwrap
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.utilities.exceptions import CheckpointError


def _setup(fabric: Fabric, seed: int = 0) -> tuple[Any, Any, Any]:
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(torch.arange(40.0), batch_size=4, shuffle=True))
    return model, optimizer, loader


def _train_step(model: Any, optimizer: Any, fabric: Fabric) -> None:
    loss = model(torch.randn(2, 4)).sum()
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def test_one_file_that_torch_load_weights_only_and_lightning_fabric_read(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, _ = _setup(fabric)
    _train_step(model, optimizer, fabric)
    path = tmp_path / "x.pth"
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": 3})
    assert path.is_file() and zipfile.is_zipfile(path)  # torch's own zip format
    assert [p.name for p in tmp_path.iterdir()] == ["x.pth"]  # no temporary file left

    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == 3
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded["model"][name], tensor)
    saved_opt = optimizer.state_dict()
    assert loaded["optimizer"]["param_groups"] == saved_opt["param_groups"]
    for index, moments in saved_opt["state"].items():
        for name, value in moments.items():
            assert torch.equal(loaded["optimizer"]["state"][index][name], value)

    from lightning.fabric import Fabric as LightningFabric

    lightning = LightningFabric(accelerator="cpu", devices=1)
    torch.manual_seed(7)
    other = nn.Linear(4, 3)
    other_opt = torch.optim.Adam(other.parameters(), lr=0.5)
    state: dict[str, Any] = {"model": other, "optimizer": other_opt, "step": 0}
    remainder = lightning.load(path, state)
    assert state["step"] == 3
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values(), strict=True))
    assert other_opt.param_groups[0]["lr"] == 0.1
    assert torch.equal(other_opt.state_dict()["state"][0]["exp_avg"], saved_opt["state"][0]["exp_avg"])
    assert all(key.startswith("__fabricx_") for key in remainder)  # fabricx's extras come back unrequested


def test_resume_through_a_file_is_exact(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.seed_everything(3)
    model, optimizer, loader = _setup(fabric)
    iterator = iter(loader)
    next(iterator), next(iterator)
    _train_step(model, optimizer, fabric)
    fabric.save(tmp_path / "run.ckpt", {"model": model, "optimizer": optimizer, "loader": loader, "step": 2})
    expected = {
        "batches": [next(iterator).tolist() for _ in range(3)],
        "torch": torch.rand(3).tolist(),
        "python": random.random(),
        "numpy": np.random.rand(2).tolist(),
    }

    fresh = Fabric(accelerator="cpu", devices=1)
    fresh.seed_everything(99)  # every generator elsewhere
    model2, optimizer2, loader2 = _setup(fresh, seed=5)
    state: dict[str, Any] = {"model": model2, "optimizer": optimizer2, "loader": loader2, "step": 0}
    assert fresh.load(tmp_path / "run.ckpt", state) == {}
    iterator2 = iter(loader2)
    resumed = {
        "batches": [next(iterator2).tolist() for _ in range(3)],
        "torch": torch.rand(3).tolist(),
        "python": random.random(),
        "numpy": np.random.rand(2).tolist(),
    }
    assert resumed == expected
    assert state["step"] == 2
    assert all(torch.equal(a, b) for a, b in zip(model2.state_dict().values(), model.state_dict().values()))  # noqa: B905


def test_plain_torch_and_lightning_files_load(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, _ = _setup(fabric)
    _train_step(model, optimizer, fabric)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 4}, tmp_path / "t.pt")

    from lightning.fabric import Fabric as LightningFabric

    lightning = LightningFabric(accelerator="cpu", devices=1)
    lightning.save(tmp_path / "l.ckpt", {"model": model, "optimizer": optimizer, "epoch": 5})
    for name, epoch in (("t.pt", 4), ("l.ckpt", 5)):
        model2, optimizer2, _ = _setup(fabric, seed=11)
        state: dict[str, Any] = {"model": model2, "optimizer": optimizer2, "epoch": 0}
        fabric.load(tmp_path / name, state)
        assert state["epoch"] == epoch
        assert all(torch.equal(a, b) for a, b in zip(model2.state_dict().values(), model.state_dict().values()))  # noqa: B905
        assert optimizer2.state_dict()["state"][0]["exp_avg"].equal(optimizer.state_dict()["state"][0]["exp_avg"])


class _Payload:
    def __reduce__(self) -> Any:
        return (os.system, (f"touch {_MARKER}",))


_MARKER = "/tmp/fabricx-single-file-pwned"


def test_a_crafted_pickle_is_refused_without_running_it(tmp_path: Path) -> None:
    Path(_MARKER).unlink(missing_ok=True)
    path = tmp_path / "evil.pth"
    torch.save({"model": {}, "payload": _Payload()}, path)  # a GLOBAL posix.system in the zip's data.pkl
    with zipfile.ZipFile(path) as archive:
        assert any(b"system" in archive.read(name) for name in archive.namelist() if name.endswith(".pkl"))
    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(CheckpointError, match="Refusing to load .*system"):
        fabric.load(path)
    with pytest.raises(CheckpointError, match="Refusing to load"):
        fabric.load(path, {"model": nn.Linear(1, 1)})
    legacy = tmp_path / "evil_legacy.pt"  # the pre-zip pickle format too
    legacy.write_bytes(pickle.dumps({"payload": _Payload()}))
    with pytest.raises(CheckpointError):
        fabric.load(legacy)
    assert not Path(_MARKER).exists()


def test_what_weights_only_cannot_hold_is_refused_naming_the_entry(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model, _, _ = _setup(fabric)
    path = tmp_path / "x.pt"
    fabric.save(path, {"model": model, "step": 1})
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"state\['config'\]\['args'\].*argparse.Namespace.*plain values"):
        fabric.save(path, {"model": model, "config": {"args": argparse.Namespace(lr=1)}})
    with pytest.raises(CheckpointError, match=r"state\['stats'\].*numpy.ndarray.*torch.from_numpy.*layout='directory'"):
        fabric.save(path, {"model": model, "stats": np.zeros(3)})
    assert path.read_bytes() == before  # the refused saves left the old file
    # The opt-in: the directory layout holds NumPy values (a suffix-less path, or layout="directory").
    fabric.save(tmp_path / "x_dir.pt", {"model": model, "stats": np.arange(3)}, layout="directory")
    assert (tmp_path / "x_dir.pt").is_dir()
    assert fabric.load(tmp_path / "x_dir.pt")["stats"].tolist() == [0, 1, 2]
    fabric.save(tmp_path / "plain", {"stats": np.arange(2)})
    assert (tmp_path / "plain").is_dir()
    with pytest.raises(CheckpointError, match="a directory is there"):
        fabric.save(tmp_path / "x_dir.pt", {"model": model})


def test_async_save_of_a_file(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model, optimizer, _ = _setup(fabric)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    handle = fabric.save(tmp_path / "a.pth", {"model": model, "optimizer": optimizer}, async_save=True)
    assert handle is not None
    _train_step(model, optimizer, fabric)  # changes the live weights while the file is written
    handle.wait()
    loaded = torch.load(tmp_path / "a.pth", weights_only=True)["model"]
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())


# ---------------------------------------------------------------------------------------- SIGKILL sweep

_DRIVER = textwrap.dedent(
    """
    import json, os, random, signal, sys, time
    import torch
    torch.set_num_threads(1)  # no thread pool: forking below stays safe
    from fabricx import Fabric

    path, kills = sys.argv[1], int(sys.argv[2])
    fabric = Fabric(accelerator="cpu", devices=1)

    def save_forever(step, write_end):
        while True:
            step += 1
            weight = torch.full((512, 1024), float(step))  # 2 MiB: the write takes a while
            fabric.save(path, {"model": {"weight": weight, "bias": torch.full((7,), float(step))}, "step": step})
            os.write(write_end, b"s")

    def check():
        loaded = torch.load(path, weights_only=True)  # the old file or a new one, never a broken one
        step = loaded["step"]
        assert torch.all(loaded["model"]["weight"] == step) and torch.all(loaded["model"]["bias"] == step)
        return int(step)

    rng, steps, last = random.Random(0), [], 0
    for kill in range(kills):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                save_forever(last, write_end)
            finally:
                os._exit(1)
        os.close(write_end)
        assert os.read(read_end, 1) == b"s"  # one save committed: kill it somewhere inside the next ones
        time.sleep(rng.uniform(0.0, 0.06))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        steps.append(check())
        assert steps[-1] > last
        last = steps[-1]
    print(json.dumps(steps))
    """
)


def _sweep(tmp_path: Path, kills: int) -> list[int]:
    path = tmp_path / "sweep.pth"
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script), str(path), str(kills)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("sweep.pth", "driver.py")]
    assert all(".tmp-" in name for name in leftovers), leftovers  # at most unfinished temporary files
    return steps


@pytest.mark.timeout(120)
def test_sigkill_while_saving_over_a_file_leaves_old_or_new(tmp_path: Path) -> None:
    steps = _sweep(tmp_path, kills=4)
    assert len(steps) == 4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_sweep_long(tmp_path: Path) -> None:
    steps = _sweep(tmp_path, kills=100)
    assert len(steps) == 100


# ------------------------------------------------------------------------------------- two processes


def _child(rank: int, world: int, port: int, root: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    from fabricx.strategies import DDPStrategy, FSDPStrategy

    results: dict[str, Any] = {}
    for name, strategy in (
        ("ddp", DDPStrategy(timeout=timedelta(seconds=60))),
        ("fsdp", FSDPStrategy(timeout=timedelta(seconds=60))),
    ):
        fabric = Fabric(accelerator="cpu", devices=world, strategy=strategy)
        fabric.launch()
        fabric.seed_everything(10 + rank)  # each rank its own generators
        model, optimizer, loader = _setup(fabric)
        _train_step(model, optimizer, fabric)
        iterator = iter(loader)
        next(iterator)
        path = Path(root) / f"{name}.pth"
        fabric.save(path, {"model": model, "optimizer": optimizer, "loader": loader, "step": 5})
        expected = {"batch": next(iterator).tolist(), "rand": torch.rand(2).tolist()}
        full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
        model2, optimizer2, loader2 = _setup(fabric)  # the same script again: untrained, at the first batch
        fabric.seed_everything(1234)
        state: dict[str, Any] = {"model": model2, "optimizer": optimizer2, "loader": loader2, "step": 0}
        fabric.load(path, state)
        full2 = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model2.state_dict().items()}
        results[name] = {
            "same": expected == {"batch": next(iter(loader2)).tolist(), "rand": torch.rand(2).tolist()},
            "weights": all(torch.equal(full[k], full2[k]) for k in full),
            "step": state["step"],
            "expected_batch": expected["batch"],
        }
        fabric.barrier()
    (Path(root) / f"rank{rank}.json").write_text(json.dumps(results))
    torch.distributed.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_two_processes_one_file_per_rank_state_and_fsdp_full_state(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.start_processes(_child, args=(2, port, str(tmp_path)), nprocs=2, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for name in ("ddp", "fsdp"):
        assert (tmp_path / f"{name}.pth").is_file()
        for rank in ranks:
            assert rank[name] == {**rank[name], "same": True, "weights": True, "step": 5}, name
        assert ranks[0][name]["expected_batch"] != ranks[1][name]["expected_batch"]  # rank 1's own position
        contents = torch.load(tmp_path / f"{name}.pth", weights_only=True)
        assert set(contents["__fabricx_ranks__"]) == {"1"}
        assert set(contents["model"]) == {"weight", "bias"}  # full tensors, the user's keys


def test_a_rank_the_saving_run_did_not_have_borrows_the_loaders_but_not_the_random_state(tmp_path: Path) -> None:
    # Resumed on more processes, rank 1 has no entries of its own in a file written by one process: it takes rank
    # 0's loader states (the user's and the Trainer's, whose key is fabricx's own), which decide from the world size
    # they name how to continue, the same on every rank; random states and gradients stay each rank's own. Before,
    # the Trainer's loader was left out: rank 1 started its epoch afresh while rank 0 ended it, and DDP hung.
    from fabricx.checkpoint.contents import TRAIN_LOADER_KEY, reserved_key
    from fabricx.checkpoint.torch_files import file_contents, read_single_file

    fabric = Fabric(accelerator="cpu", devices=1)
    loader = {"epoch": 1, "batches_consumed": 10, "world_size": 1}
    rng, gradients = reserved_key("rng"), reserved_key("gradients")
    per_rank = {"loader": loader, TRAIN_LOADER_KEY: loader, rng: {"torch": torch.get_rng_state()}, gradients: {}}
    contents = file_contents(fabric.strategy, tmp_path / "x.ckpt", {"step": 3}, per_rank)
    assert contents is not None
    torch.save(contents, tmp_path / "x.ckpt")
    shared, own, _ = read_single_file(tmp_path / "x.ckpt", rank=1)
    assert shared["step"] == 3
    assert own == {"loader": loader, TRAIN_LOADER_KEY: loader}
    _, rank_zero, _ = read_single_file(tmp_path / "x.ckpt", rank=0)
    assert rank_zero is not None and set(rank_zero) == set(per_rank)
