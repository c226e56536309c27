"""``fabric.save(path, state, layout="dcp")`` writes what Lightning's sharded strategies write, and back.

One launch of 2 CPU processes (gloo) runs ``_dcp_layout_job.py``: fabricx's FSDP2 strategy saves in the
``"dcp"`` layout and Lightning Fabric's ModelParallelStrategy (FSDP2; Lightning's FSDPStrategy is FSDP1,
which cannot save state dicts on CPU) loads it into a model built from another seed; then Lightning
trains a step and saves its own sharded checkpoint, which fabricx loads shard by shard and also reads in
full in one process. Every model and optimizer tensor must come back bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.differential._two_ranks import launch_two_ranks

JOB = Path(__file__).with_name("_dcp_layout_job.py")
# About 40 s on 2 busy cores, most of it importing Lightning in both processes.
pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.timeout(300)]


def _launch(out: Path) -> None:
    launch_two_ranks(JOB, str(out))


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
