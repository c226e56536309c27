"""Each shim in fabricx/_compat/ relies on a private name of a library; these fail loudly when it goes."""

from __future__ import annotations

import pytest
import torch

from fabricx._compat.activation_checkpoint import composable_checkpoint
from fabricx._compat.lr_scheduler import STEP_WRAPPED_FLAG


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)


def test_torch_lr_scheduler_still_tracks_steps_with_these_names():
    optimizer = _optimizer()
    torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    assert getattr(optimizer.step, STEP_WRAPPED_FLAG, False), (
        f"torch's LRScheduler no longer marks the wrapped optimizer.step with {STEP_WRAPPED_FLAG!r}: "
        "update fabricx/_compat/lr_scheduler.py"
    )


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


def test_grad_scaler_still_records_each_optimizers_unscale_stage():
    from fabricx._compat.torch_internals import optimizer_unscaled_this_step

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    assert not optimizer_unscaled_this_step(scaler, optimizer)
    scaler.unscale_(optimizer)
    assert optimizer_unscaled_this_step(scaler, optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert not optimizer_unscaled_this_step(scaler, optimizer)  # a new step starts unscaled


def test_fsdp2_still_exposes_its_managed_parameters(tmp_path):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from fabricx._compat.torch_internals import fsdp_params_of, unsharded_accumulated_grad

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        fully_shard(model[0], mesh=init_device_mesh("cpu", (1,)))
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        inner = [tuple(p.sharded_param.shape) for p in fsdp_params_of(model[0])]
        outer = [tuple(p.sharded_param.shape) for p in fsdp_params_of(model)]
        assert sorted(inner) == [(4,), (4, 3)]
        assert sorted(outer) == [(2,), (2, 4)]  # the root manages only what its children do not
        assert all(unsharded_accumulated_grad(p) is None for p in fsdp_params_of(model))
        model.set_requires_gradient_sync(False)
        model(torch.ones(2, 3)).sum().backward()
        held = [unsharded_accumulated_grad(p) for p in fsdp_params_of(model)]
        assert all(g is not None for g in held), "FSDP2 no longer keeps the unsharded gradient where the shim reads"
    finally:
        dist.destroy_process_group()


def test_default_process_group_store_is_still_reachable(tmp_path):
    import torch.distributed as dist

    from fabricx._compat.torch_internals import default_store

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert default_store().add("fabricx/test", 1) == 1
    finally:
        dist.destroy_process_group()


def test_ddp_reducer_can_still_be_prepared_for_a_backward_inside_forward(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from fabricx._compat.torch_internals import prepare_ddp_reducer_for_backward

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = DistributedDataParallel(torch.nn.Linear(2, 1))
        model.require_backward_grad_sync = False  # DDP's forward leaves the reducer alone
        loss = model(torch.ones(1, 2)).sum()
        model.require_backward_grad_sync = True
        prepare_ddp_reducer_for_backward(model, [])
        loss.backward()
        assert model.module.weight.grad is not None
        # Prepared again before the first backward finished reducing, DDP refuses (the check the Trainer names).
        prepare_ddp_reducer_for_backward(model, [])
        model.module.bias.sum().backward()  # the weight gets no gradient: reduction stays unfinished
        with pytest.raises(RuntimeError, match="Expected to have finished reduction in the prior iteration"):
            prepare_ddp_reducer_for_backward(model, [])
    finally:
        dist.destroy_process_group()


def test_dcp_chunk_narrowing_still_exists():
    from fabricx._compat.torch_internals import narrow_tensor_by_index

    full = torch.arange(16.0).reshape(4, 4)
    assert torch.equal(narrow_tensor_by_index(full, (1, 2), (2, 2)), full[1:3, 2:4])


def test_module_hook_dicts_still_hold_registered_hooks():
    from fabricx._compat.torch_internals import has_own_forward_hooks

    module = torch.nn.Linear(2, 2)
    assert not has_own_forward_hooks(module)
    handle = module.register_forward_pre_hook(lambda m, args: None)
    assert has_own_forward_hooks(module)
    handle.remove()
    module.register_forward_hook(lambda m, args, out: None)
    assert has_own_forward_hooks(module)


def test_torch_xla_tpu_type_where_torch_xla_is_installed():
    pytest.importorskip("torch_xla", reason="torch_xla exists only on TPU hosts; fabricx/_compat/xla.py reads it there")
    from fabricx._compat.xla import tpu_type

    assert tpu_type().startswith("v")


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


def test_batch_norm_base_is_still_the_base_of_every_batch_norm():
    from fabricx._compat.torch_internals import batch_norm_base

    base = batch_norm_base()
    assert all(issubclass(cls, base) for cls in (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.SyncBatchNorm))
    assert not issubclass(torch.nn.LayerNorm, base)


def test_lr_scheduler_still_counts_its_steps_privately():
    from fabricx._compat.lr_scheduler import count_scheduler_step, scheduler_step_count

    optimizer = _optimizer()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    assert scheduler_step_count(scheduler) == 1  # the constructor's step
    optimizer.step()
    scheduler.step()
    assert scheduler_step_count(scheduler) == 2
    count_scheduler_step(scheduler)
    assert scheduler_step_count(scheduler) == 3
    assert optimizer.param_groups[0]["lr"] == 0.5  # counting changed no learning rate


def test_fsspec_still_strips_protocols_with_its_private_rule():
    import fsspec

    from fabricx._compat.fsspec_paths import strip_protocol

    assert strip_protocol(fsspec.filesystem("memory"), "memory://runs/exp1") == "/runs/exp1"
    assert strip_protocol(fsspec.filesystem("file"), "file:///tmp/x/").rstrip("/") == "/tmp/x"


def test_mkldnn_fp16_check_still_answers():
    from fabricx._compat.torch_internals import mkldnn_fp16_supported

    assert hasattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported"), "update fabricx/_compat/torch_internals.py"
    assert isinstance(mkldnn_fp16_supported(), bool)


def test_step_pre_hooks_are_still_found_in_torchs_registries():
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from fabricx._compat.optimizer_hooks import has_step_pre_hooks

    optimizer = _optimizer()
    assert not has_step_pre_hooks(optimizer)
    handle = optimizer.register_step_pre_hook(lambda opt, args, kwargs: None)
    assert has_step_pre_hooks(optimizer), "update fabricx/_compat/optimizer_hooks.py: a per-optimizer hook is unseen"
    handle.remove()
    assert not has_step_pre_hooks(optimizer)
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: None)
    try:
        assert has_step_pre_hooks(optimizer), "update fabricx/_compat/optimizer_hooks.py: a global hook is unseen"
    finally:
        handle.remove()


def test_grad_mode_switch_still_exists_and_the_copy_is_detached():
    from fabricx._compat.torch_internals import detached_copy

    assert callable(torch._C._set_grad_enabled), "update fabricx/_compat/torch_internals.py"
    weight = torch.ones((), requires_grad=True)
    loss = weight * 3
    copy = detached_copy(loss)
    assert copy.item() == 3.0 and not copy.requires_grad and copy.grad_fn is None
    assert copy.untyped_storage().data_ptr() != loss.untyped_storage().data_ptr()
    assert torch.is_grad_enabled(), "the copy must leave grad mode as it found it"
    with torch.no_grad():
        detached_copy(loss)
        assert not torch.is_grad_enabled()


def test_data_loader_still_holds_its_persistent_iterator_privately():
    from torch.utils.data import DataLoader

    from fabricx._compat.torch_internals import next_pass_resets_workers

    loader = DataLoader(range(4), batch_size=2, num_workers=1, persistent_workers=True)
    assert not next_pass_resets_workers(loader)
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]
    assert next_pass_resets_workers(loader), (
        "torch's DataLoader no longer keeps its persistent workers' iterator as `_iterator`: "
        "update fabricx/_compat/torch_internals.py"
    )
    del loader  # ends the worker


def test_load_state_dict_pre_hooks_and_overrides_are_still_found():
    from fabricx._compat.torch_internals import loads_state_plainly

    assert loads_state_plainly(torch.nn.Linear(2, 2))
    assert loads_state_plainly(torch.nn.BatchNorm1d(2))
    hooked = torch.nn.Linear(2, 2)
    handle = hooked.register_load_state_dict_pre_hook(lambda *args: None)
    assert not loads_state_plainly(hooked)
    handle.remove()
    assert loads_state_plainly(hooked)

    class OwnLoading(torch.nn.Linear):
        def _load_from_state_dict(self, *args: object, **kwargs: object) -> None:
            super()._load_from_state_dict(*args, **kwargs)  # type: ignore[arg-type]

    assert not loads_state_plainly(OwnLoading(2, 2))


def test_deepspeed_private_names_the_shims_call_still_exist():
    pytest.importorskip("deepspeed")
    import deepspeed.ops
    from deepspeed.runtime import compiler
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    # fabricx/_compat/deepspeed.py: the elastic ZeRO shard readers and ZeRO-2's gradient partition buffer.
    assert callable(getattr(DeepSpeedEngine, "_get_all_zero_checkpoints", None)), "update fabricx/_compat/deepspeed.py"
    assert callable(getattr(DeepSpeedEngine, "_get_zero_param_shapes", None)), "update fabricx/_compat/deepspeed.py"
    assert callable(getattr(DeepSpeedZeroOptimizer, "_build_compact_grad_partition_buffer", None)), (
        "update fabricx/_compat/deepspeed.py"
    )
    # The CPU switches: the op table the shared-memory all-reduce is looked up in, and the compile decorator.
    assert isinstance(deepspeed.ops.__compatible_ops__, dict), "update fabricx/_compat/deepspeed.py"
    assert callable(compiler.compile) and callable(compiler.dummy_decorator), "update fabricx/_compat/deepspeed.py"
