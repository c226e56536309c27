"""Exact resumption as a matrix (cells.py): each cell's stopped-and-resumed run equals its uninterrupted run.

The fast suite runs a seeded sample (``FABRICX_MATRIX_SEED``, default below; always the one-process and DDP
groups); ``-m slow`` runs every cell, one test per launch group. A failing cell prints the command that runs
it alone. Cells fabricx refuses on purpose are listed in `cells.refusal` and in the checkpointing guide's
resumption table; their resume must raise the documented error (checked like any other outcome).
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cells import PRECISIONS, TRAINER_CONFIGS, all_cells, fast_sample, known_inexact
from runner import reproduce_command, run_cells

FAST_SEED = int(os.environ.get("FABRICX_MATRIX_SEED", "38"))


def _assert_exact(cells, tmp_path: Path) -> None:
    report = run_cells(cells, tmp_path)
    fixed = [cell.id for cell in cells if known_inexact(cell) and not report[cell.id]]
    assert not fixed, f"cells now exact: remove them from cells.known_inexact: {fixed}"
    failed = {cell: report[cell.id] for cell in cells if report[cell.id] and not known_inexact(cell)}
    lines = []
    for cell, problems in failed.items():
        lines.append(f"{cell.id}: " + "; ".join(p[:400] for p in problems[:3]))
        lines.append(f"    reproduce alone: {reproduce_command(cell)}")
    assert not failed, f"{len(failed)} of {len(cells)} cells are not exact:\n" + "\n".join(lines)


def test_matrix_is_the_space_users_live_in():
    cells = all_cells()
    ids = [cell.id for cell in cells]
    assert len(ids) == len(set(ids)), "every cell has its own id (its reproduce command)"
    axes = {name: {getattr(cell, name) for cell in cells} for name in ("api", "strategy", "loader", "stop")}
    assert {"fabric", "fabric_latest", "trainer", "accelerate", "accelerate_skip"} <= axes["api"]
    assert {"single", "ddp", "ddp_spawn", "fsdp", "deepspeed_stage_2"} <= axes["strategy"]
    stops = {"after_for", "last_in_for", "kill", "in_validation", "in_mid_validation", "in_epoch_end", "refit",
             "max_steps", "start"}
    assert stops <= axes["stop"]
    assert {(c.world, c.resume_world) for c in cells} >= {(1, 1), (2, 2), (2, 1), (1, 2)}
    trainer = [cell for cell in cells if cell.api == "trainer"]
    assert {(c.world, c.resume_world) for c in trainer} >= {(1, 1), (2, 2), (2, 1), (1, 2)}
    assert {"kill", "in_step", "after_stop"} <= {cell.stop for cell in trainer}
    # every loader a user hands the Trainer, on one process and two
    trainer_loaders = {"uneven", "uneven_drop_last", "custom_sampler", "batch_sampler", "iterable", "iterable_stateful",
                       "workers_persistent", "combined"}
    for world in (1, 2):
        assert trainer_loaders <= {cell.loader for cell in trainer if cell.world == cell.resume_world == world}
    # the Trainer's loaders on another number of processes too (its user-built per-rank ones are the Fabric's rows)
    assert {"uneven", "uneven_drop_last", "custom_sampler", "workers_persistent", "combined"} <= {
        cell.loader for cell in trainer if cell.elastic
    }
    assert ("ddp_spawn", 2, 1) in {(c.strategy, c.world, c.resume_world) for c in trainer}
    # every Trainer configuration of its own rows, on one process and two
    assert {(c.config, c.world) for c in trainer if c.config} == set(itertools.product(TRAINER_CONFIGS, (1, 2)))
    # the adapter on another number of processes
    assert {(c.world, c.resume_world) for c in cells if c.api == "accelerate"} >= {(2, 2), (2, 1), (1, 2)}
    # the sharded strategies on another number of processes, through both APIs
    for api, strategy in itertools.product(("fabric", "trainer"), ("fsdp", "deepspeed_stage_2")):
        assert {(c.world, c.resume_world) for c in cells if (c.api, c.strategy) == (api, strategy)} >= {(2, 1), (1, 2)}
    assert {(cell.scheduler, cell.clip) for cell in trainer} >= {("step", True), ("epoch", False), ("", True)}
    # every precision under every strategy (DeepSpeed on CPU has no float16), through both APIs
    by_precision = {(cell.api, cell.strategy, cell.precision) for cell in cells}
    for strategy, precision in itertools.product(("single", "ddp", "fsdp", "deepspeed_stage_2"), PRECISIONS):
        no_fp16 = (strategy, precision) == ("deepspeed_stage_2", "16-mixed")
        assert ("fabric", strategy, precision) in by_precision or no_fp16
    trainer_rows = {("trainer", strategy, precision) for strategy in ("single", "ddp") for precision in PRECISIONS}
    assert trainer_rows <= by_precision


@pytest.mark.timeout(1200)
def test_seeded_sample_of_the_matrix_resumes_exactly(tmp_path):
    _assert_exact(fast_sample(FAST_SEED), tmp_path)


def _groups() -> dict[str, list]:
    groups: dict[str, list] = {}
    for cell in all_cells():
        groups.setdefault("-".join(map(str, cell.group)), []).append(cell)
    return groups


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("group", sorted(_groups()))
def test_every_cell_of_the_matrix_resumes_exactly(group, tmp_path):
    _assert_exact(_groups()[group], tmp_path)
