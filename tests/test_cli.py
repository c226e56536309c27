"""The ``fabricx`` command: ``run`` through torchrun (one node and two "nodes" on loopback), ``env``,
``consolidate``, and how flags reach ``Fabric()``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from fabricx.cli import (
    DEFAULT_MULTI_NODE_PORT,
    RunOptions,
    _parser,
    build_torchrun_args,
    collect_environment,
    flag_environment,
    main,
    print_environment,
    processes_per_node,
)
from fabricx.connector import Connector
from fabricx.environments.local import find_free_port
from fabricx.strategies.parallel import ParallelStrategy
from fabricx.utilities.exceptions import MisconfigurationError

# Model, data and loop shared by the script below and the in-test reference.
_COMMON = textwrap.dedent(
    """
    import torch

    STEPS, PER_RANK_BATCH, LR = 10, 4, 0.1

    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def make_data(world_size):
        generator = torch.Generator().manual_seed(1)
        total = STEPS * world_size * PER_RANK_BATCH
        return torch.randn(total, 4, generator=generator), torch.randn(total, 1, generator=generator)

    def batches(x, y, batch, rank, world_size):
        # step s: the global batch is rows [s*batch, (s+1)*batch); rank r takes its contiguous slice
        per_rank = batch // world_size
        for s in range(STEPS):
            start = s * batch + rank * per_rank
            yield x[start:start + per_rank], y[start:start + per_rank]
    """
)

_SCRIPT = _COMMON + textwrap.dedent(
    """
    import json, os, sys
    from fabricx import Fabric

    torch.set_num_threads(1)
    out_file, mode = sys.argv[1], sys.argv[2]
    if mode == "explicit":
        fabric = Fabric(accelerator="cpu", devices=2)
        plain = Fabric()  # a second Fabric without flags joins the same job
        assert (plain.global_rank, plain.world_size) == (fabric.global_rank, 2)
    else:
        fabric = Fabric()
    fabric.launch()
    rank, world = fabric.global_rank, fabric.world_size
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer = fabric.setup(model, optimizer)
    x, y = make_data(world)
    for xb, yb in batches(x, y, world * PER_RANK_BATCH, rank, world):
        fabric.backward(torch.nn.functional.mse_loss(model(xb), yb))
        optimizer.step()
        optimizer.zero_grad()
    info = {
        "rank": rank, "world": world, "node_rank": fabric.node_rank, "local_rank": fabric.local_rank,
        "strategy": type(fabric.strategy).__name__, "environment": type(fabric.strategy.cluster_environment).__name__,
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
        "threads": torch.get_num_threads(),
    }
    with open(f"{out_file}.rank{rank}.json", "w") as f:
        json.dump(info, f)
    """
)


def _reference_weights() -> list[torch.Tensor]:
    namespace: dict = {}
    exec(_COMMON, namespace)
    model = namespace["make_model"]()
    optimizer = torch.optim.SGD(model.parameters(), lr=namespace["LR"])
    x, y = namespace["make_data"](2)
    batch = 2 * namespace["PER_RANK_BATCH"]
    for xb, yb in namespace["batches"](x, y, batch, 0, 1):  # one process, batch 2b
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        optimizer.zero_grad()
    return [p.detach().flatten() for p in model.parameters()]


def _clean_env() -> dict[str, str]:
    drop = ("FABRICX_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "TORCHELASTIC", "GROUP_RANK")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _fabricx_run(tmp_path: Path, *flags: str, out: str, mode: str) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    command = [sys.executable, "-m", "fabricx", "run", *flags, str(script), str(tmp_path / out), mode]
    return subprocess.Popen(
        command, cwd=tmp_path, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _results(tmp_path: Path, out: str, ranks: int) -> list[dict]:
    return [json.loads((tmp_path / f"{out}.rank{r}.json").read_text()) for r in range(ranks)]


def _assert_matches_reference(results: list[dict]) -> None:
    reference = _reference_weights()
    for info in results:
        for got, want in zip(info["weights"], reference, strict=True):
            torch.testing.assert_close(torch.tensor(got), want, atol=1e-6, rtol=0)


@pytest.mark.distributed
def test_run_two_devices_matches_one_process_with_double_batch(tmp_path: Path) -> None:
    process = _fabricx_run(tmp_path, "--accelerator", "cpu", "--devices", "2", out="single", mode="explicit")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    results = _results(tmp_path, "single", 2)
    assert [(r["rank"], r["world"], r["local_rank"]) for r in results] == [(0, 2, 0), (1, 2, 1)]
    assert {r["strategy"] for r in results} == {"DDPStrategy"}
    assert {r["environment"] for r in results} == {"TorchElasticEnvironment"}
    _assert_matches_reference(results)


@pytest.mark.distributed
def test_run_two_nodes_on_loopback(tmp_path: Path) -> None:
    port = str(find_free_port())
    common = ("--num-nodes", "2", "--devices", "1", "--main-address", "127.0.0.1", "--main-port", port)
    nodes = [
        _fabricx_run(tmp_path, *common, "--node-rank", str(rank), out="nodes", mode="plain") for rank in (0, 1)
    ]
    for node in nodes:
        _, stderr = node.communicate(timeout=120)
        assert node.returncode == 0, stderr
    results = _results(tmp_path, "nodes", 2)
    assert [(r["rank"], r["node_rank"], r["local_rank"], r["world"]) for r in results] == [(0, 0, 0, 2), (1, 1, 0, 2)]
    assert results[0]["weights"] == results[1]["weights"]
    _assert_matches_reference(results)


@pytest.mark.distributed
@pytest.mark.slow  # torchrun's own failure handling; the default suite covers fabricx's launchers
def test_run_exits_non_zero_when_a_rank_fails(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "from fabricx import Fabric\n"
        "fabric = Fabric()\n"
        "fabric.launch()\n"
        "if fabric.global_rank == 1:\n"
        "    raise RuntimeError('rank one failed under fabricx run')\n"
        "fabric.barrier()\n"
    )
    command = [sys.executable, "-m", "fabricx", "run", "--devices", "2", "--accelerator", "cpu", str(script)]
    result = subprocess.run(command, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "rank one failed under fabricx run" in result.stderr and "Traceback" in result.stderr


# -- argument building (no processes) ---------------------------------------------------------------
@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def test_torchrun_args_single_node_uses_a_free_port(script: str) -> None:
    args = build_torchrun_args(RunOptions(script=script, accelerator="cpu", devices="3", script_args=["--lr", "1"]))
    assert args[:4] == ["--nproc-per-node=3", "--nnodes=1", "--node-rank=0", "--master-addr=127.0.0.1"]
    port = int(args[4].removeprefix("--master-port="))
    assert 0 < port < 65536
    assert args[5:] == [script, "--lr", "1"]


def test_torchrun_args_multi_node_and_restarts(script: str) -> None:
    options = RunOptions(
        script=script, accelerator="cpu", devices="2", num_nodes=4, node_rank=3, main_address="10.0.0.1",
        max_restarts=2,
    )
    # elastic restarts rendezvous through c10d, which assigns node ranks itself
    assert build_torchrun_args(options) == [
        "--nproc-per-node=2", "--nnodes=4", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=10.0.0.1:{DEFAULT_MULTI_NODE_PORT}", "--max-restarts=2", script,
    ]
    options.main_port = 1234
    assert "--rdzv-endpoint=10.0.0.1:1234" in build_torchrun_args(options)
    options.max_restarts = 0
    assert "--master-port=1234" in build_torchrun_args(options)
    assert "--node-rank=3" in build_torchrun_args(options)


def test_script_arguments_reach_the_script_untouched() -> None:
    args = _parser().parse_args(["run", "--devices", "2", "train.py", "--devices", "5", "--strategy", "x"])
    assert (args.devices, args.strategy, args.script) == ("2", None, "train.py")
    assert args.script_args == ["--devices", "5", "--strategy", "x"]


def test_processes_per_node() -> None:
    assert processes_per_node(RunOptions(script="s", accelerator="cpu", devices="4")) == 4
    assert processes_per_node(RunOptions(script="s", accelerator="cpu")) == 1


def test_flags_become_environment_variables_only_when_given() -> None:
    options = RunOptions(script="s", devices="2", precision="bf16-mixed", num_nodes=2)
    assert flag_environment(options) == {
        "FABRICX_DEVICES": "2", "FABRICX_PRECISION": "bf16-mixed", "FABRICX_NUM_NODES": "2"
    }
    assert flag_environment(RunOptions(script="s")) == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node-rank", "2", "--num-nodes", "2"], "--node-rank 2"),
        (["--precision", "8"], "precision"),
        (["--strategy", "dpp"], "--strategy 'dpp'"),
        (["--accelerator", "cpu", "--devices", "0,1"], "--devices 0,1"),
        (["--accelerator", "abacus"], "--accelerator 'abacus'"),
        (["--max-restarts", "-1"], "--max-restarts"),
    ],
)
def test_run_refuses_bad_flags(
    argv: list[str], message: str, script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", *argv, script])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_script_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--devices", "2", "no_such_script.py"])
    assert "no_such_script.py" in capsys.readouterr().err


def test_flag_in_code_that_contradicts_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABRICX_DEVICES", "2")
    monkeypatch.setenv("FABRICX_ACCELERATOR", "cpu")
    with pytest.raises(MisconfigurationError, match="--devices 2"):
        Connector(accelerator="cpu", devices=3)
    assert Connector(devices=2).strategy.world_size == 2  # agreeing values are fine
    assert Connector().strategy.world_size == 2  # unset values take the command line's


def test_devices_auto_takes_the_layout_torchrun_created(monkeypatch: pytest.MonkeyPatch) -> None:
    layout = {"TORCHELASTIC_RUN_ID": "job", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
              "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    for name, value in layout.items():
        monkeypatch.setenv(name, value)
    strategy = Connector(accelerator="cpu").strategy  # devices="auto", num_nodes=1 in code
    assert isinstance(strategy, ParallelStrategy), type(strategy).__name__  # torchrun's 4 processes
    assert strategy.launcher is None  # torchrun made the processes
    assert (strategy.world_size, strategy.num_processes, strategy.num_nodes) == (4, 2, 2)
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank) == (3, 1, 1)
    with pytest.raises(MisconfigurationError, match="nproc-per-node"):
        Connector(accelerator="cpu", devices=3)


# -- env ------------------------------------------------------------------------------------------------
def test_env_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    for expected in ("Hardware:", "cpu: available", "Cluster:", "LocalEnvironment", "torch: " + torch.__version__,
                     "fabricx:", "lightning_utilities:", "torchdata:", "deepspeed:"):
        assert expected in text


def test_env_lists_every_package_cores_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    assert main(["env"]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    for package in ("torch", "lightning_utilities", "torchmetrics", "rich", "safetensors", "torchdata", "numpy"):
        assert f"{package}: {version(package.replace('_', '-'))}" in lines, package
    # Installed extras show their version (the venv of `make test` has them all); a missing one says so.
    for package in ("tensorboard", "mlflow", "wandb", "matplotlib", "deepspeed", "s3fs"):
        try:
            expected = f"{package}: {version(package)}"
        except Exception:
            expected = f"{package}: not installed"
        assert expected in lines, package
    assert f"cpu: available, {os.cpu_count()} cores" in "\n".join(lines)
    memory = next(line for line in lines if line.startswith("memory: "))
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        total_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        assert memory.startswith(f"memory: {total_gib:.1f} GiB"), memory


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import fabricx

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fabricx {fabricx.__version__}"


@pytest.mark.parametrize("command", ["run", "env", "consolidate", "plot"])
def test_every_command_help_has_a_description(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert text.startswith(f"usage: fabricx {command}")
    # argparse prints the description between the usage block and the argument lists.
    blocks = text.split("\n\n")
    assert len(blocks) >= 3 and not blocks[1].startswith(("options:", "positional arguments:")), text


def test_run_errors_print_the_usage_of_run(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--num-nodes", "x", script], ["--accelerator", "abacus", script], ["--devices", "2", "absent.py"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["run", *argv])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("usage: fabricx run "), err
        assert "fabricx run: error:" in err


def test_run_refuses_tpu_saying_it_is_not_supported(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--accelerator", "tpu", script])
    assert "does not support TPU training" in capsys.readouterr().err


def test_plot_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err
    # What was given and what to give instead.
    assert f"no such directory: {str(tmp_path / 'absent')!r}" in err, err
    assert "metrics.csv" in err, err


def test_env_reports_ranks_under_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
                        "GROUP_RANK": "1", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "2000"}.items():
        monkeypatch.setenv(name, value)
    cluster = collect_environment()["Cluster"]
    assert cluster["environment"] == "TorchElasticEnvironment"
    assert (cluster["global rank"], cluster["local rank"], cluster["node rank"], cluster["world size"]) == (
        "3", "1", "1", "4"
    )


def test_env_uses_a_rich_table_on_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    print_environment(out)
    text = out.getvalue()
    assert "Versions" in text and "torchdata" in text and any(c in text for c in "┃│|")
    assert "Versions:" not in text  # not the plain-text form


# -- consolidate ------------------------------------------------------------------------------------------
def test_consolidate_calls_the_checkpoint_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = []

    def fake_consolidate(path: str, output: str | None) -> Path:
        calls.append((path, output))
        return Path(output or path + ".consolidated")

    fake = types.ModuleType("fabricx.checkpoint.consolidate")
    vars(fake).update(consolidate_checkpoint=fake_consolidate)  # a module built here declares no attributes
    monkeypatch.setitem(sys.modules, "fabricx.checkpoint.consolidate", fake)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    assert main(["consolidate", str(ckpt), "-o", str(tmp_path / "full")]) == 0
    assert main(["consolidate", str(ckpt)]) == 0
    assert calls == [(str(ckpt), str(tmp_path / "full")), (str(ckpt), None)]
    assert f"into {ckpt}.consolidated" in capsys.readouterr().out


def test_consolidate_a_real_checkpoint_that_is_not_sharded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real module refuses (or copies) a checkpoint without shards; either way it answers cleanly.
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.save(tmp_path / "ckpt", {"model": torch.nn.Linear(2, 2)})
    code = main(["consolidate", str(tmp_path / "ckpt")])
    captured = capsys.readouterr()
    assert (code == 0 and "Consolidated" in captured.out) or (code == 1 and "fabricx consolidate:" in captured.err)


def test_consolidate_explains_a_missing_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "fabricx.checkpoint.consolidate", None)
    assert main(["consolidate", str(tmp_path)]) == 1
    assert "consolidate" in capsys.readouterr().err
    assert main(["consolidate", str(tmp_path / "absent")]) == 2


def test_node_zero_keeps_the_store_up_until_the_other_nodes_have_left() -> None:
    """The other nodes of a static job read torchrun's exit barrier from node 0's store: it must outlive their reads."""
    import threading

    from fabricx.environments.local import find_free_port
    from fabricx.strategies.launchers.node_departure import _say_left, nodes_leave_together

    port = find_free_port()
    host_left = threading.Event()

    def node_zero() -> None:
        with nodes_leave_together("127.0.0.1", port, node_rank=0, num_nodes=2):
            pass
        host_left.set()

    thread = threading.Thread(target=node_zero)
    thread.start()
    assert not host_left.wait(1.0)  # node 1 has not said it left: node 0 stays
    _say_left("127.0.0.1", port)
    assert host_left.wait(10.0)
    thread.join()
