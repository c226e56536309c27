"""Asking the scheduler itself to requeue a job, where an exit code cannot reach it.

``fabric.exit_for_requeue()`` exits with code 85. Under plain ``torchrun`` that code never reaches the
scheduler: torchrun's agent reports any failed worker as exit 1. On SLURM the job can be requeued
from inside instead, with ``scontrol requeue <job id>`` (what Lightning's auto-requeue does). That
needs no exit code at all, so it works under ``srun``, ``torchrun`` and ``fabricx run`` alike.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

#: Set to ``0`` to keep fabricx from calling ``scontrol requeue`` (leave requeueing to your wrapper).
SLURM_REQUEUE_ENV = "FABRICX_SLURM_REQUEUE"
_INTERACTIVE_JOB_NAMES = ("bash", "interactive")


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes for this SLURM job (``ARRAYID_TASKID`` for an array task), or None.

    None outside SLURM, in an interactive allocation (job name ``bash``/``interactive``), or when
    ``FABRICX_SLURM_REQUEUE=0``.

    Example:
        ```python
        slurm_job_id()  # "123456" inside `sbatch train.sh`
        ```
    """
    if os.environ.get(SLURM_REQUEUE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id or os.environ.get("SLURM_JOB_NAME") in _INTERACTIVE_JOB_NAMES:
        return None
    array_job, array_task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and array_task:
        job_id = f"{array_job}_{array_task}"
    return job_id if re.fullmatch(r"[0-9]+(_[0-9]+)?", job_id) else None


def request_slurm_requeue(timeout: float = 30.0) -> bool:
    """Run ``scontrol requeue`` for this job; True if it succeeded. Call it from one process only.

    Does nothing (returns False) where `slurm_job_id()` gives None. A missing ``scontrol`` or a
    refusal (a job submitted with ``--no-requeue``) is reported on stderr, never raised: the process
    is about to exit with the requeue code anyway.

    Example:
        ```python
        if fabric.is_global_zero:
            request_slurm_requeue()
        ```
    """
    job_id = slurm_job_id()
    if job_id is None:
        return False
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        sys.stderr.write(f"fabricx: cannot requeue SLURM job {job_id}: `scontrol` is not on PATH.\n")
        return False
    try:
        result = subprocess.run(
            [scontrol, "requeue", job_id], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        sys.stderr.write(f"fabricx: `scontrol requeue {job_id}` failed: {error}\n")
        return False
    if result.returncode != 0:
        sys.stderr.write(
            f"fabricx: `scontrol requeue {job_id}` exited {result.returncode}: {result.stderr.strip()} "
            "(submit the job with `#SBATCH --requeue` to allow requeueing).\n"
        )
        return False
    sys.stderr.write(f"fabricx: requested a requeue of SLURM job {job_id}.\n")
    return True
