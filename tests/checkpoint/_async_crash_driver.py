"""Helper process for the asynchronous-save crash trials (see test_ckpt_async_crash.py).

It imports torch once, then for every project path read from stdin forks a trainer that resumes from
the project's latest checkpoint and saves asynchronously in a loop, printing ``saving <step>`` as
soon as ``fabric.save_checkpoint(..., async_save=True)`` returns (the background write has begun).
Right after that the trainer overwrites every tensor with garbage through an optimizer step, as
training would (the step waits until the save has copied what it changes), so a checkpoint that
captured live memory instead of its staged copy would show it. The helper prints the trainer's
pid and, once the test has killed it, its wait status.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch import nn

torch.set_num_threads(1)

from fabricx import Fabric  # noqa: E402
from fabricx.checkpoint.manager import CheckpointManager  # noqa: E402


def tensors_of(state: dict) -> list[torch.Tensor]:
    """Every tensor the trainer saves: parameters and Adam's moments."""
    model, optimizer = state["model"], state["optimizer"]
    found = list(model.parameters())
    for entry in optimizer.state.values():
        found += [value for key, value in entry.items() if key != "step"]
    return found


class Overwrite(torch.optim.Optimizer):
    """An optimizer whose step sets every tensor it holds to -1: training changing the whole state."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__(tensors, {})

    @torch.no_grad()
    def step(self, closure: object = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for tensor in group["params"]:
                tensor.fill_(-1.0)


def train_forever(project: str) -> None:
    options = json.loads(os.environ.get("FABRICX_TEST_STORAGE_OPTIONS", "null"))
    plugins = None
    if options is not None:
        from fabricx.checkpoint.storage import FsspecCheckpointIO

        plugins = [FsspecCheckpointIO(storage_options=options)]
    fabric = Fabric(accelerator="cpu", plugins=plugins)
    width = int(os.environ.get("FABRICX_TEST_WIDTH", "256"))
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(8)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.ones(2, width)).sum().backward()
    optimizer.step()
    state = {"model": model, "optimizer": optimizer, "step": 0}
    manager = CheckpointManager(project, total_limit=2, io=plugins[0] if plugins else None)
    fabric.load_latest(manager, state)
    step = state["step"]
    overwrite = Overwrite(tensors_of(state))
    while True:
        step += 1
        with torch.no_grad():
            for tensor in tensors_of(state):
                tensor.fill_(float(step))
        state["step"] = step
        fabric.save_checkpoint(manager, state, async_save=True)
        print(f"saving {step}", flush=True)
        overwrite.step()  # training goes on and changes every tensor while the save is written


def main() -> None:
    # Creating the first optimizer imports much of torch (seconds); do it once here, not in every trainer.
    torch.optim.Adam(nn.Linear(1, 1).parameters())
    Fabric(accelerator="cpu")
    if os.environ.get("FABRICX_TEST_STORAGE_OPTIONS"):  # the S3 client stack, imported once
        import botocore.session
        import s3fs  # noqa: F401

        botocore.session.get_session().get_service_model("s3")
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                train_forever(line.strip())
            finally:
                os._exit(1)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"status {status}", flush=True)


if __name__ == "__main__":
    main()
