"""``fabric.save(path, state, layout="dcp")`` writes what Lightning's sharded strategies write, and back.

One launch of 2 CPU processes (gloo) runs ``_dcp_layout_job.py``: fabricx's FSDP2 strategy saves in the
``"dcp"`` layout and Lightning Fabric's ModelParallelStrategy (FSDP2; Lightning's FSDPStrategy is FSDP1,
which cannot save state dicts on CPU) loads it into a model built from another seed; then Lightning
trains a step and saves its own sharded checkpoint, which fabricx loads shard by shard and also reads in
full in one process. Every model and optimizer tensor must come back bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fabricx.environments.local import find_free_port

JOB = Path(__file__).with_name("_dcp_layout_job.py")
# About 40 s on 2 busy cores, most of it importing Lightning in both processes.
pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]


def _launch(out: Path) -> None:
    base = {key: value for key, value in os.environ.items() if key not in ("FABRICX_GLOBAL_SEED", "PL_GLOBAL_SEED")}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(find_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    base.update(GROUP_RANK="0", NODE_RANK="0")
    ranks = [
        subprocess.Popen(
            [sys.executable, str(JOB), str(out)],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for rank, process in enumerate(ranks):
        try:
            _, stderr = process.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise
        assert process.returncode == 0, f"rank {rank} exited with {process.returncode}:\n{stderr[-4000:]}"


def test_dcp_layout_is_what_lightning_model_parallel_reads_and_writes(tmp_path: Path) -> None:
    _launch(tmp_path)
    found = torch.load(tmp_path / "result.pt", weights_only=True)

    # fabricx wrote it: a torch.distributed.checkpoint folder plus Lightning's meta.pt, no fabricx meta.json
    written = tmp_path / "by_fabricx"
    assert (written / ".metadata").is_file() and (written / "meta.pt").is_file()
    assert not (written / "meta.json").exists()
    assert found["lightning_read"] == []
    assert found["lightning_step"] == 2
    assert all(key.startswith("__fabricx_") for key in found["lightning_remainder"])  # fabricx's own entries

    # Lightning wrote it: restored shard by shard into fabricx's FSDP2 model, and read in full in one process
    assert found["fabricx_read"] == []
    assert found["fabricx_step"] == 3
    assert found["fabricx_remainder"] == []
    assert found["fabricx_full_read"] == []
