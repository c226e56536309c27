"""Elastic membership: ``fabricx run --num-nodes 1:2`` starts an elastic job on torchrun's c10d
rendezvous; when a node is lost mid-epoch the remaining node restarts its workers, resumes from the
latest complete checkpoint at the smaller size and finishes with every sample of each epoch seen
exactly once (the loader deals the rest of the interrupted epoch across the ranks that are left).

The fast tests check the torchrun command line; the two-node kill runs for real and is marked slow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from fabricx.cli import RunOptions, build_torchrun_args, flag_environment, main, parse_num_nodes
from fabricx.environments.local import find_free_port


def test_num_nodes_range_selects_the_elastic_c10d_rendezvous(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    options = RunOptions(
        script=str(script), accelerator="cpu", devices="2", num_nodes=4, min_nodes=1, main_address="10.0.0.7",
        main_port=2345, max_restarts=3, rdzv_conf="last_call_timeout=5", run_id="job7",
    )
    assert build_torchrun_args(options) == [
        "--nproc-per-node=2", "--nnodes=1:4", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.7:2345",
        "--rdzv-id=job7", "--max-restarts=3", "--rdzv-conf=last_call_timeout=5", str(script),
    ]
    # The number of nodes changes between attempts: Fabric reads it from torchrun's WORLD_SIZE instead.
    assert "FABRICX_NUM_NODES" not in flag_environment(options)
    assert parse_num_nodes("2") == (None, 2) and parse_num_nodes("1:3") == (1, 3)
    assert parse_num_nodes(None) == (None, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-nodes", "3:2"], "MIN:MAX needs 1 <= MIN <= MAX"),
        (["--num-nodes", "two"], "give a count"),
        (["--num-nodes", "1:2", "--node-rank", "1"], "numbers the nodes itself"),
        (["--rdzv-conf", "join_timeout=5"], "needs --num-nodes MIN:MAX"),
    ],
)
def test_elastic_usage_errors(tmp_path, capsys, argv, message):
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(SystemExit) as raised:
        main(["run", "--accelerator", "cpu", "--nproc-per-node", "1", *argv, str(script)])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


JOB = r"""
import json, os, sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.strategies import DDPStrategy

out = Path(sys.argv[1])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
(out / "workers").mkdir(exist_ok=True)  # which agent (node) started this worker, for the test to kill
(out / "workers" / f"{os.getpid()}.json").write_text(json.dumps({"pid": os.getpid(), "agent": os.getppid()}))
fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=30))
fabric.launch()
torch.set_num_threads(1)
fabric.seed_everything(0)
model = torch.nn.Linear(4, 1)
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.arange(48), torch.randn(48, 4, generator=g))
loader = fabric.setup_dataloaders(DataLoader(data, batch_size=2, shuffle=True))
state = {"model": model, "optimizer": optimizer, "loader": loader, "history": []}
manager = CheckpointManager(out / "project", total_limit=2)
fabric.load_latest(manager, state)
while not (loader.epoch >= 2 and loader.state_dict()["finished"]):
    for ids, x in loader:
        everyone = fabric.all_gather(ids).reshape(-1).tolist()
        fabric.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        state["history"].append([loader.epoch, fabric.world_size, attempt, everyone])
        fabric.save_checkpoint(manager, state)
        if fabric.is_global_zero:
            (out / "progress.json").write_text(json.dumps(state["history"]))
        time.sleep(0.3)  # a slow step, so that the node is lost mid-epoch
if fabric.is_global_zero:
    (out / "history.json").write_text(json.dumps(state["history"]))
"""


def _wait_for_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the rendezvous never listened on port {port}")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_losing_a_node_mid_epoch_continues_on_one_node_with_every_sample_once(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()
    port = find_free_port()
    command = [sys.executable, "-m", "fabricx", "run", "--num-nodes", "1:2", "--nproc-per-node", "2"]
    command += ["--accelerator", "cpu", "--max-restarts", "3", "--main-port", str(port), "--run-id", "elastic"]
    command += ["--rdzv-conf", "last_call_timeout=20,join_timeout=300", str(script), str(out)]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    logs = [open(tmp_path / f"node{n}.log", "w") for n in range(2)]  # noqa: SIM115
    # Node A starts first and hosts the rendezvous store, so losing node B leaves the job reachable.
    node_a = subprocess.Popen(command, stdout=logs[0], stderr=subprocess.STDOUT, env=env)
    _wait_for_port(port, time.monotonic() + 120)
    node_b = subprocess.Popen(command, stdout=logs[1], stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            progress = out / "progress.json"
            history = json.loads(progress.read_text()) if progress.exists() else []
            if sum(1 for entry in history if entry[1] == 4) >= 2:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the two-node job never took two steps on 4 ranks")
        # Node B vanishes mid-epoch: its agent and its workers (torchrun starts them in their own sessions).
        workers = [json.loads(f.read_text()) for f in (out / "workers").glob("*.json")]
        os.killpg(node_b.pid, signal.SIGKILL)
        for worker in workers:
            if worker["agent"] == node_b.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker["pid"], signal.SIGKILL)
        assert node_a.wait(timeout=400) == 0, (tmp_path / "node0.log").read_text()[-4000:]
    finally:
        for process in (node_a, node_b):
            if process.poll() is None:
                process.kill()
        for log in logs:
            log.close()
    history = json.loads((out / "history.json").read_text())
    worlds = [world for _, world, _, _ in history]
    assert 4 in worlds and worlds[-1] == 2, worlds  # began on 2 nodes, finished on the one left
    for epoch in range(3):
        samples = [i for e, _, _, ids in history if e == epoch for i in ids]
        assert sorted(samples) == list(range(48)), f"epoch {epoch}: {sorted(samples)}"
