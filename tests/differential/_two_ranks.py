"""Launch a job script as 2 CPU processes of one gloo group (ranks from the environment, as torchrun sets them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fabricx.environments.local import find_free_port

#: Seeds a parent test run may have set, which would make the two processes' runs differ from a fresh one.
_SEED_VARIABLES = ("FABRICX_GLOBAL_SEED", "PL_GLOBAL_SEED")


def launch_two_ranks(job: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> None:
    """Run ``python job *args`` as ranks 0 and 1 side by side; raise with a rank's stderr if either fails.

    Example:
        ```python
        launch_two_ranks(JOB, str(tmp_path), env={"DS_ACCELERATOR": "cpu"})
        ```
    """
    base = {key: value for key, value in os.environ.items() if key not in _SEED_VARIABLES}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(find_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    base.update(GROUP_RANK="0", NODE_RANK="0", **(env or {}))
    ranks = [
        subprocess.Popen(
            [sys.executable, str(job), *args],
            env={**base, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for rank, process in enumerate(ranks):
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise
        assert process.returncode == 0, f"rank {rank} exited with {process.returncode}:\n{stderr[-4000:]}"
