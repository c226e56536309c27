"""Accelerate's own ``examples/`` (copies in ``examples/``, see its README) run through Accelerate and through
fabricx's adapter with only the Accelerator-side names swapped (``run_example.py``: stand-in tiny BERT, tokenizer,
synthetic MRPC and metric, identical for both), one process and two. Every example must end as it ends on
Accelerate, print the same metrics and leave bit-identical final parameters in every model it prepared.

One launch per (framework, process count) runs a group of examples in sequence. The fast suite runs one
representative example on one process; the whole list is ``@pytest.mark.slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
RUNNER = HERE / "run_example.py"
sys.path.insert(0, str(HERE))
from run_example import EXAMPLES  # noqa: E402

pytestmark = pytest.mark.distributed


def _run(tmp_path: Path, processes: int, names: list[str], peer: bool) -> list[dict]:
    """Each rank's records (name -> outcome, printed metric lines, parameter digests) of one launch."""
    out = tmp_path / f"{'peer' if peer else 'fabricx'}{processes}"
    command = [sys.executable, str(RUNNER), str(out), "--names", *names]
    if processes > 1:
        command[1:1] = ["-m", "fabricx", "run", "--accelerator", "cpu", "--devices", str(processes)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if peer:  # Accelerate itself; ACCELERATE_USE_CPU is what `accelerate launch --cpu` sets
        env.update(ACCELERATE_SUITE_PEER="1", ACCELERATE_USE_CPU="1")
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-5000:])
    return [json.loads((out / f"rank_{rank}.json").read_text()) for rank in range(processes)]


def _compare(tmp_path: Path, processes: int, names: list[str]) -> None:
    theirs = _run(tmp_path, processes, names, peer=True)
    ours = _run(tmp_path, processes, names, peer=False)
    for rank, (peer_records, our_records) in enumerate(zip(theirs, ours, strict=True)):
        assert set(our_records) == set(peer_records) == set(names)
        for name in names:
            peer_record, our_record = peer_records[name], our_records[name]
            if peer_record["outcome"] == "passed":
                assert our_record["outcome"] == "passed", (processes, rank, name, our_record["outcome"])
                # the run must have trained and evaluated something, on both
                assert our_record["parameters"], (processes, rank, name)
                if rank == 0:
                    assert our_record["printed"], (processes, name)
            assert our_record == peer_record, (processes, rank, name)


def test_representative_example_gives_accelerates_metrics_and_parameters(tmp_path):
    _compare(tmp_path, 1, ["nlp_example"])


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("processes", [1, 2])
def test_every_example_gives_accelerates_metrics_and_parameters(tmp_path, processes):
    _compare(tmp_path, processes, list(EXAMPLES))
