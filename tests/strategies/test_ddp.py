"""DDPStrategy on real gloo process groups: equivalence, gradient sync switching, collectives.

The multi-process checks are grouped into few launches (each spawn costs seconds); the spawned
functions live at module level so that the children can import them.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import random
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from fabricx import Fabric, seed_everything
from fabricx.connector import Connector
from fabricx.loggers import CSVLogger
from fabricx.strategies import DDPStrategy, SingleDeviceStrategy
from fabricx.strategies.launchers.multiprocessing import MultiprocessingLauncher
from fabricx.strategies.launchers.subprocess_script import SubprocessScriptLauncher
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.process_group import EXIT_BARRIER_SECONDS

pytestmark = pytest.mark.distributed

STEPS = 10
PER_RANK_BATCH = 4
LR = 0.1


# -- the equivalence workload: same model, data and optimizer everywhere --------------------------
def _make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _make_data(total: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(total, 4, generator=generator), torch.randn(total, 1, generator=generator)


def _reference_weights(world_size: int) -> list[torch.Tensor]:
    """One plain process with batch ``world_size * PER_RANK_BATCH``: what DDP must reproduce."""
    model = _make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _make_data(STEPS * world_size * PER_RANK_BATCH)
    batch = world_size * PER_RANK_BATCH
    for step in range(STEPS):
        xb, yb = x[step * batch : (step + 1) * batch], y[step * batch : (step + 1) * batch]
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def _train_with_fabric(fabric: Fabric) -> list[torch.Tensor]:
    model = _make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = fabric.setup(model, optimizer)
    x, y = _make_data(STEPS * fabric.world_size * PER_RANK_BATCH)
    # Sequential order: the distributed sampler gives rank r the samples r, r + world, ...; together
    # the ranks' batches of one step are the single process's batch of that step.
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y), batch_size=PER_RANK_BATCH))
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


# -- everything checked in one 2-process launch ------------------------------------------------------
def _grads(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in module.parameters()])


def _no_backward_sync_checks(fabric: Fabric) -> dict:
    rank = fabric.global_rank
    plain = _make_model()  # an unsynchronised twin: what this rank's gradients alone are
    model = fabric.setup_module(_make_model())
    first = torch.full((3, 4), float(rank + 1))
    second = torch.full((3, 4), float(rank + 1) * -0.5)
    with fabric.no_backward_sync(model):
        fabric.backward(model(first).pow(2).sum())
    local_after_first = _grads(model).clone()
    plain(first).pow(2).sum().backward()
    plain_after_first = _grads(plain).clone()
    gathered_first = fabric.all_gather(local_after_first)
    fabric.backward(model(second).pow(2).sum())  # synced: averages everything accumulated so far
    synced = _grads(model).clone()
    plain(second).pow(2).sum().backward()
    expected = fabric.all_reduce(_grads(plain), reduce_op="mean")
    return {
        "first_differs_across_ranks": not torch.allclose(gathered_first[0], gathered_first[1]),
        "first_is_local": torch.allclose(local_after_first, plain_after_first, atol=1e-6),
        "synced_equal_across_ranks": bool(torch.equal(*fabric.all_gather(synced).unbind(0))),
        "synced_is_mean_of_accumulated": torch.allclose(synced, expected, atol=1e-6),
    }


def _collective_checks(fabric: Fabric, tmp_dir: str) -> dict:
    rank, world = fabric.global_rank, fabric.world_size
    out: dict = {}
    fabric.barrier("start")
    # broadcast: objects, and tensors whose shape only the source knows
    out["object_from_0"] = fabric.broadcast({"rank": rank, "list": [rank, "x"]}, src=0)
    out["object_from_1"] = fabric.broadcast(("sent by", rank), src=1)
    local = torch.arange(6.0).reshape(2, 3) if rank == 0 else torch.zeros(5)
    out["tensor_from_0"] = fabric.broadcast(local, src=0)
    out["broadcast_left_input_alone"] = torch.equal(local, torch.arange(6.0).reshape(2, 3)) if rank == 0 else True
    # all_gather: equal shapes (stacked), unequal shapes (list), scalars, nested collections
    out["gather_equal"] = fabric.all_gather(torch.tensor([rank, rank * 10]))
    out["gather_uneven"] = fabric.all_gather(torch.full((rank + 1, 2), float(rank)))
    out["gather_uneven_2d"] = fabric.all_gather(torch.ones(2 + rank, 3 - rank, dtype=torch.int32) * rank)
    out["gather_scalar"] = fabric.all_gather(torch.tensor(float(rank)))
    out["gather_nested"] = fabric.all_gather({"a": torch.tensor([rank]), "b": [torch.ones(1, 2) * rank]})
    # all_reduce: every op, tensors, ints, Python numbers, nested; in place on the input (as Lightning)
    out["reduce"] = {}
    for op in ("mean", "sum", "min", "max"):
        value = torch.tensor([1.0 + rank, 10.0 * rank])
        out["reduce"][op] = fabric.all_reduce(value, reduce_op=op)
        out["reduce_in_place"] = out.get("reduce_in_place", True) and out["reduce"][op] is value
    out["reduce_int_mean"] = fabric.all_reduce(torch.tensor(rank), reduce_op="mean")
    out["reduce_number"] = fabric.all_reduce(float(rank + 1), reduce_op="sum")
    out["reduce_nested"] = fabric.all_reduce({"x": torch.tensor(rank + 1.0)}, reduce_op="max")
    # rank_zero_first: rank 0 creates the file the other ranks then read
    marker = os.path.join(tmp_dir, "prepared.txt")
    with fabric.rank_zero_first():
        if rank == 0:
            time.sleep(0.3)
            Path(marker).write_text("ready")
        out["saw_prepared_file"] = Path(marker).read_text() == "ready"
    # print and loggers on rank zero only
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        fabric.print("hello from", rank)
    out["printed"] = buffer.getvalue()
    fabric.log("rank_logged", float(rank), step=0)
    for logger in fabric.loggers:
        logger.finalize("success")
    fabric.barrier("end")
    assert world == 2
    return out


def _sampler_checks(fabric: Fabric) -> dict:
    dataset = TensorDataset(torch.arange(16))
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=4, shuffle=True))
    epochs = []
    for _ in range(2):
        seen = [int(i) for (batch,) in loader for i in batch]
        epochs.append(fabric.all_gather(torch.tensor(seen)))
    # An IterableDataset is read as it is on every rank (Lightning's rule: no sampler, not refused).
    stream = fabric.setup_dataloaders(DataLoader(_Stream(), batch_size=2))
    streamed = [batch.tolist() for batch in stream]
    return {"epochs": epochs, "streamed": streamed, "num_batches": len(loader)}


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(8))


def _random_draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), torch.rand(()).item()


def _spawn_checks(fabric: Fabric, tmp_dir: str) -> dict:
    draws = _random_draws()  # before anything else draws: what the launching process would draw next
    torch.set_num_threads(1)
    model = fabric.setup_module(torch.nn.Linear(2, 2))
    inner = model._forward_module
    results = {
        "rank": fabric.global_rank,
        "draws": draws,
        "ddp_wrapped": isinstance(inner, DistributedDataParallel),
        "broadcast_buffers_passed_through": inner.broadcast_buffers is False,
        "backend": torch.distributed.get_backend(),
        "timeout_s": fabric.strategy.timeout.total_seconds(),
        "weights": _train_with_fabric(fabric),
        "no_backward_sync": _no_backward_sync_checks(fabric),
        "collectives": _collective_checks(fabric, tmp_dir),
        "sampler": _sampler_checks(fabric),
    }
    # Every rank's results reach the test through rank 0's return value.
    results["other_ranks"] = fabric.broadcast(results if fabric.global_rank == 1 else None, src=1)
    # Larger than a pipe buffer: the launcher must read it while rank 0 is still alive.
    results["big"] = torch.ones(300_000)
    return results


def test_ddp_spawn_two_processes(tmp_path: Path) -> None:
    strategy = DDPStrategy(start_method="spawn", timeout=60, broadcast_buffers=False)
    logger = CSVLogger(tmp_path / "logs", name="run", flush_logs_every_n_steps=1)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy, loggers=logger)
    seed_everything(123)
    results = fabric.launch(_spawn_checks, str(tmp_path))

    assert results["rank"] == 0 and results["other_ranks"]["rank"] == 1
    # The spawned processes start from the launching process's generators (seed_everything reaches them).
    seed_everything(123)
    assert results["draws"] == results["other_ranks"]["draws"] == _random_draws()
    for res in (results, results["other_ranks"]):
        assert res["ddp_wrapped"] and res["broadcast_buffers_passed_through"]
        assert res["backend"] == "gloo" and res["timeout_s"] == 60

    # Equivalence: 2 ranks x batch 4 == 1 process x batch 8, after 10 SGD steps.
    reference = _reference_weights(world_size=2)
    for res in (results, results["other_ranks"]):
        for got, want in zip(res["weights"], reference, strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)

    # no_backward_sync really skips the all-reduce, and the next synced backward averages it all.
    for res in (results, results["other_ranks"]):
        assert res["no_backward_sync"] == {
            "first_differs_across_ranks": True,
            "first_is_local": True,
            "synced_equal_across_ranks": True,
            "synced_is_mean_of_accumulated": True,
        }

    c0, c1 = results["collectives"], results["other_ranks"]["collectives"]
    for c in (c0, c1):
        assert c["object_from_0"] == {"rank": 0, "list": [0, "x"]}
        assert c["object_from_1"] == ("sent by", 1)
        torch.testing.assert_close(c["tensor_from_0"], torch.arange(6.0).reshape(2, 3))
        assert c["broadcast_left_input_alone"]
        torch.testing.assert_close(c["gather_equal"], torch.tensor([[0, 0], [1, 10]]))
        uneven = c["gather_uneven"]
        assert isinstance(uneven, list) and [t.shape for t in uneven] == [(1, 2), (2, 2)]
        torch.testing.assert_close(uneven[0], torch.zeros(1, 2))
        torch.testing.assert_close(uneven[1], torch.ones(2, 2))
        uneven_2d = c["gather_uneven_2d"]
        assert [tuple(t.shape) for t in uneven_2d] == [(2, 3), (3, 2)]
        assert uneven_2d[0].dtype == torch.int32 and uneven_2d[1].eq(1).all() and uneven_2d[0].eq(0).all()
        torch.testing.assert_close(c["gather_scalar"], torch.tensor([0.0, 1.0]))
        torch.testing.assert_close(c["gather_nested"]["a"], torch.tensor([[0], [1]]))
        torch.testing.assert_close(c["gather_nested"]["b"][0], torch.tensor([[[0.0, 0.0]], [[1.0, 1.0]]]))
        reduce = c["reduce"]
        torch.testing.assert_close(reduce["mean"], torch.tensor([1.5, 5.0]))
        torch.testing.assert_close(reduce["sum"], torch.tensor([3.0, 10.0]))
        torch.testing.assert_close(reduce["min"], torch.tensor([1.0, 0.0]))
        torch.testing.assert_close(reduce["max"], torch.tensor([2.0, 10.0]))
        assert c["reduce_in_place"]
        # An integer tensor keeps its dtype: the mean 0.5 is truncated, as Lightning Fabric's is.
        torch.testing.assert_close(c["reduce_int_mean"], torch.tensor(0))
        assert float(c["reduce_number"]) == 3.0
        assert float(c["reduce_nested"]["x"]) == 2.0
        assert c["saw_prepared_file"]
    assert c0["printed"] == "hello from 0\n" and c1["printed"] == ""
    with open(tmp_path / "logs" / "run" / "version_0" / "metrics.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(float(r["rank_logged"]), int(r["step"])) for r in rows] == [(0.0, 0)]  # rank 0's row only

    # Each rank gets its own share: disjoint, complete, reshuffled each epoch, same permutation.
    s0, s1 = results["sampler"], results["other_ranks"]["sampler"]
    assert s0["num_batches"] == s1["num_batches"] == 2
    for epoch in range(2):
        shares = s0["epochs"][epoch]
        torch.testing.assert_close(shares, s1["epochs"][epoch])
        assert sorted(shares.flatten().tolist()) == list(range(16))
    assert not torch.equal(s0["epochs"][0], s0["epochs"][1])
    assert not torch.equal(s0["epochs"][0].flatten(), torch.arange(16))
    assert s0["streamed"] == s1["streamed"] == [[0, 1], [2, 3], [4, 5], [6, 7]]

    big = results["big"]
    assert big.shape == (300_000,) and bool(big.eq(1).all())


# -- a failing rank ends the job ----------------------------------------------------------------------
def _failing(fabric: Fabric, pid_dir: str) -> None:
    torch.set_num_threads(1)
    Path(pid_dir, f"rank{fabric.global_rank}.pid").write_text(str(os.getpid()))
    fabric.barrier()
    if fabric.global_rank == 1:
        Path(pid_dir, "failed_at.txt").write_text(repr(time.time()))
        raise ValueError("rank one broke on purpose")
    fabric.all_reduce(torch.ones(1))  # rank 0 waits here for a peer that is gone
    time.sleep(120)


def test_ddp_spawn_failing_rank_stops_the_job(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn", timeout=60))
    with pytest.raises(Exception, match="rank one broke on purpose") as error:
        fabric.launch(_failing, str(tmp_path))
    # Ended soon after the failure: neither by running into the process-group timeout (60 s) nor by the
    # failed rank waiting at its exit for peers that wait for it (EXIT_BARRIER_SECONDS).
    assert time.time() - float((tmp_path / "failed_at.txt").read_text()) < EXIT_BARRIER_SECONDS
    assert "Traceback" in str(error.value) and "_failing" in str(error.value)
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
    assert len(pids) == 2
    for pid in pids:
        assert not _alive(pid), f"process {pid} was left running"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits for its parent to read its status.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return False


# -- fork: works after this process has used its thread pool -------------------------------------------
def _forked(fabric: Fabric, offset: int) -> tuple[int, float]:
    x = torch.randn(256, 256)
    total = fabric.all_reduce((x @ x).sum() * 0 + fabric.global_rank + offset, reduce_op="sum")
    return fabric.global_rank, float(total)


def test_ddp_fork_after_threaded_work_returns_rank_zero_result() -> None:
    torch.set_num_threads(2)
    a = torch.randn(600, 600)
    (a @ a).exp().sum()  # starts the parent's OpenMP pool, which used to hang forked children
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="fork", timeout=60))
    assert fabric.launch(_forked, 10) == (0, 21.0)


# -- selection and options (no processes) --------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "launcher", "start_method", "ddp_kwargs"),
    [
        ("ddp", SubprocessScriptLauncher, "popen", {}),
        ("ddp_spawn", MultiprocessingLauncher, "spawn", {}),
        ("ddp_fork", MultiprocessingLauncher, "fork", {}),
        ("ddp_notebook", MultiprocessingLauncher, "fork", {}),
        ("ddp_find_unused_parameters_true", SubprocessScriptLauncher, "popen", {"find_unused_parameters": True}),
    ],
)
def test_registry_names(name: str, launcher: type, start_method: str, ddp_kwargs: dict) -> None:
    connector = Connector(accelerator="cpu", strategy=name, devices=2)
    strategy = connector.strategy
    assert isinstance(strategy, DDPStrategy)
    assert isinstance(strategy.launcher, launcher)
    assert strategy._start_method == start_method
    assert strategy.ddp_kwargs == ddp_kwargs
    assert strategy.world_size == 2 and strategy.num_processes == 2
    assert strategy.process_group_backend == "gloo"
    assert strategy.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}


def test_auto_picks_ddp_for_several_devices_or_nodes() -> None:
    assert isinstance(Connector(accelerator="cpu", devices=2).strategy, DDPStrategy)
    multi_node = Connector(accelerator="cpu", devices=1, num_nodes=2).strategy
    assert isinstance(multi_node, DDPStrategy) and multi_node.world_size == 2
    assert isinstance(Connector(accelerator="cpu", devices=1).strategy, SingleDeviceStrategy)


def test_options() -> None:
    assert DDPStrategy(timeout=60).timeout == timedelta(seconds=60)
    assert DDPStrategy(timeout=timedelta(minutes=2)).timeout == timedelta(minutes=2)
    assert DDPStrategy(process_group_backend="auto")._process_group_backend is None
    assert DDPStrategy(process_group_backend="gloo").process_group_backend == "gloo"
    with pytest.raises(MisconfigurationError, match="'auto'"):
        DDPStrategy(process_group_backend="tcp")
    with pytest.raises(MisconfigurationError, match="start_method"):
        DDPStrategy(start_method="thread")


def test_nccl_on_cpu_is_refused_before_any_rendezvous() -> None:
    strategy = Connector(
        accelerator="cpu", strategy=DDPStrategy(process_group_backend="nccl"), devices=1
    ).strategy
    with pytest.raises(MisconfigurationError, match="gloo"):
        strategy._init_process_group()


def test_no_backward_sync_needs_the_ddp_module() -> None:
    strategy = DDPStrategy()
    with pytest.raises(TypeError, match="fabric.setup"):
        strategy.no_backward_sync(torch.nn.Linear(1, 1))
    with strategy.no_backward_sync(torch.nn.Linear(1, 1), enabled=False):
        pass
