"""Launch resume-matrix cells in groups (two launches per group) and compare each cell's runs."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cells import KILLS, Cell  # noqa: E402
from compare import differences  # noqa: E402

sys.path.insert(0, str(HERE.parents[2]))
from tests.differential._two_ranks import launch_two_ranks  # noqa: E402

JOBS = {"fabric": "fabric_job.py", "fabric_latest": "fabric_job.py", "trainer": "trainer_job.py",
        "accelerate": "accelerate_job.py", "accelerate_skip": "accelerate_job.py"}
TRAINER_CELLS_PER_LAUNCH = 8
_CLEAN_ENV = ("FABRICX_GLOBAL_SEED", "PL_GLOBAL_SEED", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")


def reproduce_command(cell: Cell, out: str = "/tmp/resume-cell") -> str:
    """The command that runs ``cell`` alone (printed with a failing cell)."""
    return f"python {HERE / 'runner.py'} {out} {cell.id}"


def _launch(
    job: str, out: Path, phase: str, ids: list[str], *, world: int = 1, expect_kill: bool = False, timeout: int = 900
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    env.update(OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", PYTHONWARNINGS="ignore")
    # The two runs of a cell are compared bit for bit across processes; MKL's products are reproducible across
    # processes only with its Conditional Numerical Reproducibility on (without it, the adapter's stateful-loader
    # cell stopped inside an accumulation window got one gradient element 1 ulp off in the resumed process, with
    # weights, batch, loss and restored gradients bit-equal). Builds without MKL ignore the variable.
    env.setdefault("MKL_CBWR", "COMPATIBLE")
    if job == "accelerate_job.py" and world > 1:  # as `accelerate launch` starts it: one process per rank
        launch_two_ranks(HERE / job, str(out), phase, *ids, env=env, timeout=timeout)
        return
    result = _run_or_dump_stacks([sys.executable, str(HERE / job), str(out), phase, *ids], env, timeout)
    if expect_kill:
        if result.returncode != -9:
            raise RuntimeError(f"{phase} of {ids} was to die by SIGKILL, exited {result.returncode}:\n"
                               f"{result.stderr[-3000:]}")
    elif result.returncode != 0:
        raise RuntimeError(f"{phase} of {len(ids)} cell(s) exited {result.returncode}:\n{result.stderr[-6000:]}")


def _run_or_dump_stacks(command: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    """Run ``command``; past ``timeout`` every process it started (other ranks, loader workers) is sent SIGABRT,
    which makes each print its threads' stacks (``PYTHONFAULTHANDLER``), and the error quotes them: a hang says
    where it hangs."""
    process = subprocess.Popen(
        command, env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
        stacks = stderr[-12000:]
        raise RuntimeError(f"{command[2:]} outlasted {timeout} s; the stacks of its processes:\n{stacks}") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a rank or worker left behind must not outlive the launch
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def run_group(cells: list[Cell], out: Path) -> dict[str, list[str]]:
    """Run cells of one group; map each cell id to its differences (empty when exact)."""
    out.mkdir(parents=True, exist_ok=True)
    job, ids = JOBS[cells[0].api], [cell.id for cell in cells]
    # The Trainer under "ddp" starts its other process by running the script again: one fit that ends in an
    # exception per script, as a user's script has. Other Trainer cells share launches a few at a time (each fit
    # under ddp_spawn starts its processes anew: 48 cells in one launch outlast its timeout).
    batches = [ids]
    if cells[0].api == "trainer":
        under_ddp = cells[0].strategy == "ddp" or (cells[0].strategy == "single" and cells[0].resume_world > 1)
        per_launch = 1 if under_ddp else TRAINER_CELLS_PER_LAUNCH
        batches = [ids[start : start + per_launch] for start in range(0, len(ids), per_launch)]
    # A launch that fails marks its own cells and the others go on: one crash must not hide a group's other cells.
    launch_failed: dict[str, str] = {}

    def launch(phase: str, batch: list[str], **options: Any) -> None:
        batch = [cell_id for cell_id in batch if cell_id not in launch_failed]
        try:
            if batch:
                _launch(job, out, phase, batch, **options)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            # A Trainer resume refused on purpose ends the launch: rank 0 raised, and its launcher stopped the rest.
            failed = [cell_id for cell_id in batch if not (phase == "resume" and _trainer_refused(out, cell_id))]
            launch_failed.update({cell_id: f"the {phase} launch failed: {str(error)[-3000:]}" for cell_id in failed})

    for batch in batches:
        launch("first", batch, world=cells[0].world)
    for cell in cells:
        if cell.stop in KILLS:
            launch("kill", [cell.id], expect_kill=True)
    for batch in batches:
        launch("resume", batch, world=cells[0].resume_world)
    report: dict[str, list[str]] = {cell_id: [problem] for cell_id, problem in launch_failed.items()}
    for cell in cells:
        if cell.id in launch_failed:
            continue
        try:
            straight = _records(out, cell, "straight", cell.world)
            stopped_val = None
            if cell.stop in KILLS:
                killed = torch.load(out / f"{cell.id}.kill_trace.pt", weights_only=False)
                if isinstance(killed, dict):  # the Trainer's: its trace and its validation results
                    stopped, stopped_val = [killed["trace"]], [killed["val"]]
                else:
                    stopped = [killed]
            else:
                records = _records(out, cell, "first", cell.world)
                stopped = [record["trace"] for record in records]
                stopped_val = [record.get("val", []) for record in records]
            resumed = _records(out, cell, "resume", cell.resume_world)
        except (FileNotFoundError, KeyError) as error:
            report[cell.id] = [f"a run left no record: {error}"]
            continue
        report[cell.id] = differences(cell, straight, stopped, resumed, stopped_val)
    return report


@functools.lru_cache(maxsize=8)
def _load(path: Path) -> Any:
    return torch.load(path, weights_only=False)


def _trainer_refused(out: Path, cell_id: str) -> bool:
    """Whether a Trainer cell's resume was refused (its rank 0 wrote the refusal; any other rank was stopped)."""
    path = out / f"{cell_id}.resume.rank0.pt"
    return path.is_file() and "refused" in torch.load(path, weights_only=False)


def _records(out: Path, cell: Cell, run: str, world: int) -> list[dict]:
    """Per rank, the record of one of the cell's runs (``straight``, ``first`` or ``resume``)."""
    if cell.api == "trainer":  # each rank of each fit writes its own file
        if run == "resume" and _trainer_refused(out, cell.id):
            world = 1
        return [torch.load(out / f"{cell.id}.{run}.rank{r}.pt", weights_only=False) for r in range(world)]
    phase = "resume" if run == "resume" else "first"
    return [_load(out / f"{phase}_rank{r}.pt")[cell.id][run] for r in range(world)]


def run_cells(cells: list[Cell], out: Path) -> dict[str, list[str]]:
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.group, []).append(cell)
    report: dict[str, list[str]] = {}
    for number, group in enumerate(groups.values()):
        try:
            report.update(run_group(group, out / f"group{number}"))
        except (RuntimeError, AssertionError, subprocess.TimeoutExpired) as error:
            report.update({cell.id: [f"the group's launch failed: {error}"] for cell in group})
    return report


if __name__ == "__main__":
    from cells import by_id

    out_dir, *cell_ids = sys.argv[1:]
    outcome = run_cells([by_id(i) for i in cell_ids], Path(out_dir))
    for cell_id, problems in outcome.items():
        print(("EXACT   " if not problems else "DIFFERS ") + cell_id)
        for problem in problems:
            print("    " + problem)
    sys.exit(1 if any(outcome.values()) else 0)
