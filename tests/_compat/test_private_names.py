"""Each shim in fabricx/_compat/ relies on a private name of a library; these fail loudly when it goes."""

from __future__ import annotations

import warnings

import pytest
import torch

from fabricx._compat.activation_checkpoint import composable_checkpoint
from fabricx._compat.lr_scheduler import STEP_CALLED_FLAG, STEP_WRAPPED_FLAG, retarget_scheduler


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)


def test_torch_lr_scheduler_still_tracks_steps_with_these_names():
    optimizer = _optimizer()
    torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    assert getattr(optimizer.step, STEP_WRAPPED_FLAG, False), (
        f"torch's LRScheduler no longer marks the wrapped optimizer.step with {STEP_WRAPPED_FLAG!r}: "
        "update fabricx/_compat/lr_scheduler.py"
    )
    optimizer.step()
    assert getattr(optimizer, STEP_CALLED_FLAG, False), (
        f"torch's LRScheduler no longer sets optimizer.{STEP_CALLED_FLAG}: update fabricx/_compat/lr_scheduler.py"
    )


def test_retargeted_scheduler_warns_exactly_as_torch_does():
    old, new = _optimizer(), _optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(old, step_size=1)
    retarget_scheduler(scheduler, old, new)
    assert scheduler.optimizer is new
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the right order: torch sees the step, no warning
        new.step()
        scheduler.step()
    fresh_old, fresh_new = _optimizer(), _optimizer()
    late = torch.optim.lr_scheduler.StepLR(fresh_old, step_size=1)
    retarget_scheduler(late, fresh_old, fresh_new)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        late.step()  # the wrong order: torch still reads our tracking and warns


def test_composable_checkpoint_is_still_where_the_shim_looks():
    checkpoint = composable_checkpoint()
    block = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    checkpoint(block)
    x = torch.randn(2, 3, requires_grad=True)
    block(x).sum().backward()
    assert x.grad is not None


def test_random_sampler_still_records_num_samples_privately():
    from torch.utils.data import RandomSampler

    from fabricx._compat.sampler import NUM_SAMPLES_ATTRIBUTE, draws_a_permutation

    plain = RandomSampler(range(4))
    assert hasattr(plain, NUM_SAMPLES_ATTRIBUTE), (
        f"torch's RandomSampler no longer has {NUM_SAMPLES_ATTRIBUTE!r}: update fabricx/_compat/sampler.py"
    )
    assert draws_a_permutation(plain)
    assert not draws_a_permutation(RandomSampler(range(4), num_samples=4))
    assert not draws_a_permutation(RandomSampler(range(4), replacement=True))


def test_dcp_private_readers_still_exist(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    from fabricx._compat.dcp import empty_state_dict_planner_class, load_state_dict_without_process_group

    dcp.save({"w": torch.arange(4.0)}, storage_writer=dcp.FileSystemWriter(tmp_path), no_dist=True)
    state: dict = {}
    planner = empty_state_dict_planner_class()(keys={"w"})
    load_state_dict_without_process_group(state, FileSystemReader(tmp_path), planner)
    assert torch.equal(state["w"], torch.arange(4.0)), (
        "torch.distributed.checkpoint's _EmptyStateDictLoadPlanner/_load_state_dict changed: update "
        "fabricx/_compat/dcp.py"
    )


def test_thread_shutdown_hook_still_runs_before_atexit_and_can_set_the_exit_status():
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import atexit, threading, time
        from fabricx._compat.thread_shutdown import at_thread_shutdown, exit_after_shutdown
        atexit.register(lambda: print("atexit ran"))
        worker = threading.Thread(target=lambda: (time.sleep(0.2), print("worker finished")))
        worker.start()
        assert at_thread_shutdown(lambda: (print("hook ran"), exit_after_shutdown(3))), "private hook is gone"
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, (
        f"threading._register_atexit no longer runs before atexit at shutdown: update "
        f"fabricx/_compat/thread_shutdown.py ({done.stderr[-500:]})"
    )
    assert done.stdout.split() == ["hook", "ran", "worker", "finished", "atexit", "ran"], done.stdout
