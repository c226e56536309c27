"""Every example runs end to end, as a user would start it, with reduced sizes; resumed runs continue exactly.

(``examples/accelerate_tutorial.py`` is exercised by tests/compat/test_accelerate_tutorial.py.)
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fabricx.environments.local import find_free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TIMEOUT = 240

pytestmark = pytest.mark.timeout(600)


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "FABRICX_"))}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    # One thread per process: the examples' tiny models on a shared 2-core machine.
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", COLUMNS="120", **extra)
    return env


def _run(args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None) -> str:
    process = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=TIMEOUT
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"{' '.join(args)} exited {process.returncode}:\n{output[-4000:]}"
    return output


def _checksum(output: str) -> str:
    found = re.findall(r"weight checksum (\S+)", output)
    assert found, f"no checksum printed:\n{output[-2000:]}"
    return found[-1]


# -- convert_loop.py ------------------------------------------------------------------------------------
def test_convert_loop_runs_both_loops_and_both_learn() -> None:
    output = _run(["examples/convert_loop.py", "--accelerator", "cpu", "--epochs", "3", "--limit", "600"])
    accuracies = {name: float(value) for name, value in re.findall(r"\[(plain|fabric)\]\s+test accuracy (\S+)", output)}
    assert set(accuracies) == {"plain", "fabric"}, output[-2000:]
    # Ten classes: chance is 0.1; three epochs of either loop get far above it.
    assert min(accuracies.values()) > 0.5, accuracies


# -- digits_trainer.py -------------------------------------------------------------------------------------
# Slow (84 s on 2 cores): `make demo` runs this example, and the two-process test below covers resumption.
@pytest.mark.slow
def test_digits_trainer_writes_checkpoints_and_metrics_then_resumes(tmp_path: Path) -> None:
    common = ["examples/digits_trainer.py", "--accelerator", "cpu", "--limit", "400", "--batch-size", "32",
              "--root-dir", str(tmp_path), "--no-progress"]
    first = _run([*common, "--max-epochs", "1"])
    assert "Finished at step 10 in epoch 0/0: val_loss " in first, first[-2000:]
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"  # one Lightning .ckpt file
    assert last.is_file() and torch.load(last, weights_only=True)["global_step"] == 10
    assert str(last) in first
    best = re.search(r"Best checkpoint[^:]*:\s+(\S+)", first)
    assert best is not None and Path(best.group(1)).is_file(), first[-2000:]
    metrics = re.search(r"Metrics \(CSV\):\s+(\S+)", first)
    assert metrics is not None and Path(metrics.group(1)).is_file()
    assert "val_acc" in Path(metrics.group(1)).read_text()

    resumed = _run([*common, "--max-epochs", "2", "--resume"])
    # Picks up after epoch 1 (10 steps) and adds one more epoch, not two.
    assert "Finished at step 20 in epoch 1/1" in resumed, resumed[-2000:]


@pytest.mark.slow  # two full demo runs, about 2 minutes on 2 cores
def test_make_demo_runs_twice_without_a_warning(tmp_path: Path) -> None:
    # `make demo` twice in a row: the second run goes into a new version folder, so ModelCheckpoint finds no
    # earlier files in its folder (no "exists and is not empty" warning, no -v1 names).
    demo = re.search(r"^demo:.*\n\t\$\(PY\) (examples/digits_trainer\.py .*)$", (REPO / "Makefile").read_text(),
                     re.MULTILINE)
    assert demo is not None, "the Makefile's demo no longer runs examples/digits_trainer.py"
    command = [*demo.group(1).split(), "--limit", "400", "--no-progress"]
    (tmp_path / "examples").symlink_to(EXAMPLES)  # the command's relative paths, run in a fresh folder
    for run in range(2):
        process = subprocess.run([sys.executable, *command], cwd=tmp_path, env=_env(PYTHONPATH=str(REPO)),
                                 capture_output=True, text=True, timeout=TIMEOUT)
        assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-4000:]
        assert process.stderr == "", f"run {run + 1} printed:\n{process.stderr}"
        assert f"version_{run}/checkpoints/last.ckpt" in process.stdout, process.stdout[-2000:]
    names = [path.name for path in tmp_path.rglob("*.ckpt")]
    assert len(names) == 4 and not any(re.search(r"-v\d+\.ckpt$", name) for name in names), names


def test_digits_trainer_two_processes_mid_epoch_resume(tmp_path: Path) -> None:
    # 320 training samples / 2 processes / 16 per batch: 10 steps per epoch; both stops are mid-epoch.
    common = ["examples/digits_trainer.py", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_spawn",
              "--limit", "400", "--batch-size", "16", "--root-dir", str(tmp_path), "--save-every-steps", "5"]
    first = _run([*common, "--max-steps", "15"])
    # Output is a pipe: the bar prints one plain line per epoch. Its last line and the summary name the same
    # epoch (the second, index 1 of 0-9) and the same place in it; the summary's metrics are rounded.
    assert "Epoch 1/9: 5/10 " in first, first[-2000:]
    assert "Finished at step 15 in epoch 1/9: " in first, first[-2000:]
    summary = re.search(r"Finished at .*: (.*)", first)
    assert summary is not None and re.fullmatch(r"val_loss \d+\.\d{4}, val_acc \d\.\d{4}", summary.group(1)), summary
    last = torch.load(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "steps" / "last.ckpt",
                      weights_only=True)
    assert "__fabricx_train_loader__" in last["__fabricx_ranks__"]["1"]  # rank 1's own loader position
    resumed = _run([*common, "--max-steps", "23", "--resume"])
    assert "step 23" in resumed, resumed[-2000:]
    assert "starting fresh" not in resumed, resumed[-2000:]
    # Rows carry Lightning's 0-based logger step (optimizer steps done before the batch). The first run saved
    # inside batch 15's on_train_batch_end (logger step 14); the second run finished that batch, logging
    # its restored train_loss at step 14 exactly as the first run did, and re-ran no earlier batch.
    first_rows = _csv_rows(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")
    rows = _csv_rows(tmp_path / "lightning_logs" / "version_1" / "metrics.csv")
    steps = [int(row["step"]) for row in rows]
    assert steps and min(steps) == 14, steps
    step_loss = [row["train_loss"] for row in rows if row["step"] == "14" and row["train_loss"]]
    assert step_loss == [row["train_loss"] for row in first_rows if row["step"] == "14" and row["train_loss"]]
    assert any(int(row["step"]) > 15 and row["train_loss"] for row in rows), rows


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# -- char_gpt.py ---------------------------------------------------------------------------------------------
_GPT_TINY = ["--accelerator", "cpu", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16",
             "--batch-size", "4", "--text-bytes", "20000", "--sample-bytes", "20", "--log-every", "2",
             "--decay-steps", "10"]


def test_char_gpt_resumes_mid_epoch_to_the_same_weights(tmp_path: Path) -> None:
    gpt = ["examples/char_gpt.py", *_GPT_TINY]
    straight = _run([*gpt, "--root-dir", str(tmp_path / "a"), "--max-steps", "10", "--save-every", "0"])
    assert "---- sample ----" in straight
    _run([*gpt, "--root-dir", str(tmp_path / "b"), "--max-steps", "4", "--save-every", "3"])
    resumed = _run([*gpt, "--root-dir", str(tmp_path / "b"), "--max-steps", "10", "--save-every", "3", "--resume"])
    assert "at step 4 (epoch 0)" in resumed, resumed[-2000:]
    assert _checksum(resumed) == _checksum(straight)
    # Retention keeps the two newest checkpoints; the CSV logger wrote the losses.
    assert len(list((tmp_path / "b" / "checkpoints").iterdir())) == 2
    assert "loss" in (tmp_path / "b" / "logs" / "version_0" / "metrics.csv").read_text()


# Slow suite only: the fast suite resumes 2-process DDP Fabric runs in the resume matrix sample (tests/resume/matrix)
# and this example on one process (above).
@pytest.mark.slow
def test_char_gpt_two_processes_ddp_resume(tmp_path: Path) -> None:
    gpt = ["examples/char_gpt.py", *_GPT_TINY, "--devices", "2", "--strategy", "ddp", "--root-dir", str(tmp_path)]
    first = _run([*gpt, "--max-steps", "3", "--save-every", "3"])
    assert "2 process(es)" in first
    resumed = _run([*gpt, "--max-steps", "6", "--save-every", "3", "--resume"])
    assert "at step 3" in resumed and "trained to step 6" in resumed, resumed[-2000:]
    ranks = sorted(p.name for p in (tmp_path / "checkpoints").glob("*/rank_*.json"))
    assert ranks.count("rank_0.json") == ranks.count("rank_1.json") >= 1


# -- multinode/ ------------------------------------------------------------------------------------------------
def _agreeing_checksums(output: str) -> list[str]:
    found = re.search(r"weight checksums of all ranks: \[(.*)\]", output)
    assert found is not None, output[-3000:]
    values = re.findall(r"'([^']+)'", found.group(1))
    assert len(values) == 2 and values[0] == values[1], values
    return values


def test_multinode_two_nodes_on_loopback_with_fabricx_run(tmp_path: Path) -> None:
    env = _env(MAIN_PORT=str(find_free_port()), FABRICX=f"{sys.executable} -m fabricx")
    process = subprocess.run(
        ["bash", str(EXAMPLES / "multinode" / "run_two_nodes_locally.sh"), "1", "--epochs", "1",
         "--checkpoint", str(tmp_path / "ckpt")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT,
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-4000:]
    assert "global rank 0 of 2, node 0" in output and "global rank 1 of 2, node 1" in output
    _agreeing_checksums(output)
    assert (tmp_path / "ckpt" / "meta.json").is_file()
    # A clean run ends cleanly: no stack trace of a node whose peer tore the store down first.
    for noise in ("Traceback", "Failed to recv", "exit barrier", "terminate called", "Exception raised from"):
        assert noise not in process.stderr, process.stderr[-4000:]


def test_multinode_script_under_srun_variables() -> None:
    """What ``srun`` in train.sbatch does: start each task with SLURM's variables (faked: no SLURM here)."""
    sbatch = (EXAMPLES / "multinode" / "train.sbatch").read_text()
    assert "srun python examples/multinode/train.py" in sbatch and "--ntasks-per-node=2" in sbatch
    port = str(find_free_port())
    processes = []
    for rank in range(2):
        env = _env(
            SLURM_NTASKS="2", SLURM_PROCID=str(rank), SLURM_LOCALID="0", SLURM_NODEID=str(rank),
            SLURM_JOB_NUM_NODES="2", SLURM_NNODES="2", SLURM_NTASKS_PER_NODE="1", SLURM_JOB_ID="4242",
            SLURM_JOB_NAME="fabricx-multinode", SLURM_NODELIST="localhost", MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        processes.append(subprocess.Popen(
            [sys.executable, "examples/multinode/train.py", "--accelerator", "cpu", "--epochs", "1"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=TIMEOUT)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    assert "global rank 1 of 2, node 1" in outputs[1]
    _agreeing_checksums(outputs[0])


# Slow (about a minute each): FSDP2 and DeepSpeed stop/resume run in tests/checkpoint/test_ckpt_pipeline_strategies.py.
@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(
    "strategy", ["fsdp", pytest.param("deepspeed_stage_2", marks=pytest.mark.deepspeed)]
)
def test_char_gpt_sharded_bf16_stops_and_resumes(tmp_path: Path, strategy: str) -> None:
    if strategy.startswith("deepspeed"):
        pytest.importorskip("deepspeed", reason="the deepspeed extra (make test installs it)")
    env = _env(DS_ACCELERATOR="cpu", DS_BUILD_OPS="0")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    gpt = ["examples/char_gpt.py", *_GPT_TINY, "--devices", "2", "--strategy", strategy,
           "--precision", "bf16-mixed", "--root-dir", str(tmp_path)]
    _run([*gpt, "--max-steps", "2", "--save-every", "2"], env=env)
    resumed = _run([*gpt, "--max-steps", "4", "--save-every", "2", "--resume"], env=env)
    assert "at step 2" in resumed and "trained to step 4" in resumed, resumed[-2000:]
    assert "---- sample ----" in resumed


# -- gan_manual.py / datamodule_trainer.py ----------------------------------------------------------------------
def test_gan_manual_optimization_example(tmp_path: Path) -> None:
    out = _run(["examples/gan_manual.py", "--accelerator", "cpu", "--max-epochs", "2", "--samples", "256",
                "--root-dir", str(tmp_path), "--no-progress"])
    # 256 samples / 64 per batch = 4 batches per epoch; each batch steps both optimizers.
    assert "Finished at step 16 in epoch 1/1" in out, out[-2000:]
    radius = re.search(r"mean radius (\d+\.\d+)", out)
    assert radius is not None and float(radius.group(1)) > 0.0


def test_datamodule_example_fits_tests_best_and_reloads(tmp_path: Path) -> None:
    out = _run(["examples/datamodule_trainer.py", "--accelerator", "cpu", "--max-epochs", "2", "--limit", "400",
                "--root-dir", str(tmp_path), "--no-progress"])
    assert "in epoch 1/1" in out, out[-2000:]
    best = re.search(r"Best checkpoint:\s+(\S+)", out)
    assert best is not None and Path(best.group(1)).is_file(), out[-2000:]  # one Lightning .ckpt file
    assert re.search(r"test_acc=\d\.\d+", out) is not None
    assert "Reloaded hparams: {'hidden': 64, 'lr': 0.05}" in out
