"""``fabric.save(path, state, layout="deepspeed")`` writes what Lightning's DeepSpeedStrategy writes, and back.

One launch of 2 CPU processes (gloo, ``DS_ACCELERATOR=cpu``, ZeRO stage 2) runs ``_deepspeed_layout_job.py``:
fabricx's DeepSpeed strategy saves in the ``"deepspeed"`` layout and Lightning Fabric's DeepSpeedStrategy (its
CUDA-only check skipped) loads it into a model built from another seed; then Lightning trains a step and saves
its own checkpoint, which fabricx loads under other state keys and also reads in full in one process. Each
rank's weights, fp32 master partition and Adam state must come back bit for bit, the client state equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fabricx.checkpoint.layouts.deepspeed import ENGINE_STATE_KEYS
from tests.differential._two_ranks import launch_two_ranks

pytest.importorskip("deepspeed")
JOB = Path(__file__).with_name("_deepspeed_layout_job.py")
# About 40 s on 2 busy cores, most of it importing Lightning and DeepSpeed in both processes.
pytestmark = [pytest.mark.distributed, pytest.mark.deepspeed, pytest.mark.slow, pytest.mark.timeout(300)]


def _launch(out: Path) -> None:
    launch_two_ranks(JOB, str(out), env={"DS_ACCELERATOR": "cpu"})


def _files(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def test_deepspeed_layout_is_what_lightning_deepspeed_reads_and_writes(tmp_path: Path) -> None:
    _launch(tmp_path)
    results = [torch.load(tmp_path / f"result_{rank}.pt", weights_only=True) for rank in range(2)]

    # fabricx wrote exactly the files Lightning writes: the engine's tag folder "checkpoint" and "latest"
    assert _files(tmp_path / "by_fabricx") == _files(tmp_path / "by_lightning")
    assert "checkpoint/mp_rank_00_model_states.pt" in _files(tmp_path / "by_fabricx")
    assert (tmp_path / "by_fabricx" / "latest").read_text() == "checkpoint"
    for rank, found in enumerate(results):
        assert found["lightning_read"] == [], rank  # weights, fp32 partition and Adam state bit for bit
        assert found["lightning_client"] == [], rank
        # Lightning returns fabricx's own entries and DeepSpeed's engine keys as unrequested ones
        unexpected = [key for key in found["lightning_remainder"] if not key.startswith("__fabricx_")]
        assert set(unexpected) <= ENGINE_STATE_KEYS, unexpected

        # Lightning wrote it: restored through fabricx's engine under other state keys
        assert found["fabricx_read"] == [], rank
        assert found["fabricx_client"] == [], rank
        assert found["fabricx_remainder"] == [], rank
    assert results[0]["fabricx_full_read"] == []  # rank 0 alone: the full fp32 weights and the client state
