"""The adapter against the installed Accelerate, one process, in this process: the same script through
both, compared exactly (accumulation arithmetic and flags, the prepared model's attributes,
``gradient_accumulation_steps =`` inside ``find_executable_batch_size``, the TensorBoard files).
The two-process side runs in ``accelerate_suite/`` (the ported ``test_sync.py`` and ``surface_checks.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fabricx.compat.accelerate as fx


@pytest.fixture
def hf():
    import accelerate
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import GradientAccumulationPlugin

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield SimpleNamespace(Accelerator=accelerate.Accelerator, GradientAccumulationPlugin=GradientAccumulationPlugin)
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _accumulate(api, plugin_kwargs: dict, epochs: int = 2, samples: int = 10, outside_backward: bool = False):
    """A loop with accumulation, an optimizer and a scheduler; every flag Accelerate exposes, per micro-batch."""
    plugin = api.GradientAccumulationPlugin(**plugin_kwargs)
    accelerator = api.Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    data = TensorDataset(torch.randn(samples, 3), torch.randn(samples, 1))
    loader = DataLoader(data, batch_size=2)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    trace = []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(x), y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            state = accelerator.gradient_state
            trace.append(
                (
                    accelerator.sync_gradients,
                    state.sync_gradients,
                    state.end_of_dataloader,
                    accelerator.step,
                    getattr(scheduler, "scheduler", scheduler)._step_count,  # Accelerate wraps it
                    optimizer.param_groups[0]["lr"],
                )
            )
    if outside_backward:  # outside accumulate(): divided by the steps too, and the flags as they were left
        accelerator.backward(model(torch.ones(1, 3)).sum())
        trace.append(("outside", accelerator.sync_gradients, [p.grad.tolist() for p in model.parameters()]))
    weights = [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]
    return trace, weights


@pytest.mark.parametrize(
    "plugin_kwargs",
    [
        {"num_steps": 2},
        {"num_steps": 3},
        {"num_steps": 3, "sync_with_dataloader": False},
        {"num_steps": 2, "adjust_scheduler": False},
        {"num_steps": 2, "sync_each_batch": True},
    ],
    ids=lambda kwargs: ",".join(f"{k}={v}" for k, v in kwargs.items()),
)
def test_accumulation_arithmetic_and_flags_are_accelerates(hf, plugin_kwargs):
    theirs, their_weights = _accumulate(hf, plugin_kwargs, outside_backward=True)
    ours, our_weights = _accumulate(fx, plugin_kwargs, outside_backward=True)
    assert ours == theirs
    assert all(torch.equal(a, b) for a, b in zip(our_weights, their_weights, strict=True))


def test_exact_window_scaling_is_an_explicit_option(hf):
    """The opt-in keeps fabricx's arithmetic: a short last window is divided by its real length."""
    _, accelerate_weights = _accumulate(fx, {"num_steps": 3}, epochs=1)

    class _Exact:
        GradientAccumulationPlugin = fx.GradientAccumulationPlugin

        @staticmethod
        def Accelerator(**kwargs):
            return fx.Accelerator(exact_window_scaling=True, **kwargs)

    trace, exact_weights = _accumulate(_Exact, {"num_steps": 3}, epochs=1)
    assert [row[0] for row in trace] == [False, False, True, False, True]
    assert not all(torch.equal(a, b) for a, b in zip(exact_weights, accelerate_weights, strict=True))
    # by hand: windows [0, 1, 2] divided by 3, the last [3, 4] by 2
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(10, 3), torch.randn(10, 1)
    for window, lr in (([0, 1, 2], 0.1), ([3, 4], 0.05)):
        optimizer.param_groups[0]["lr"] = lr
        for batch in window:
            part = slice(2 * batch, 2 * batch + 2)
            (nn.functional.mse_loss(model(x[part]), y[part]) / len(window)).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(exact_weights, model.parameters(), strict=True))


_ATTRIBUTES = ("module", "no_sync", "join", "require_backward_grad_sync", "device_ids", "weight", "in_features")


def test_one_process_prepared_model_answers_like_the_plain_module(hf):
    def answers(api):
        torch.manual_seed(0)
        model = api.Accelerator(cpu=True).prepare(nn.Linear(2, 1))
        return {name: hasattr(model, name) for name in _ATTRIBUTES}, model(torch.ones(1, 2)).tolist()

    assert answers(fx) == answers(hf)


def _automatic_accumulation(api, find_executable_batch_size):
    """Accelerate's by_feature/automatic_gradient_accumulation.py pattern: the per-step batch shrinks
    on out-of-memory, the accumulation steps grow to keep the observed batch size."""
    accelerator = api.Accelerator(cpu=True)
    observed, tried = 8, []

    @find_executable_batch_size(starting_batch_size=5)
    def train(batch_size):
        tried.append(batch_size)
        accelerator.free_memory()
        if batch_size > 4:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1 GiB")
        accelerator.gradient_accumulation_steps = observed // batch_size
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(24, 3), torch.randn(24, 1))
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=batch_size))
        flags = []
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
            flags.append(accelerator.sync_gradients)
        return flags, [p.tolist() for p in model.parameters()]

    flags, weights = train()
    return tried, accelerator.gradient_accumulation_steps, flags, weights


@pytest.fixture
def no_gc(monkeypatch):
    """Both implementations collect garbage before every try; that costs seconds here and changes nothing."""
    import gc

    monkeypatch.setattr(gc, "collect", lambda *args: 0)


def test_gradient_accumulation_steps_settable_inside_find_executable_batch_size(hf, no_gc):
    from accelerate.utils import find_executable_batch_size as hf_find

    assert _automatic_accumulation(fx, fx.find_executable_batch_size) == _automatic_accumulation(hf, hf_find)


def test_find_executable_batch_size_semantics_are_accelerates(no_gc):
    from accelerate.utils import find_executable_batch_size as hf_find

    def outcomes(find):
        results = []
        for fail_above, error in ((8, RuntimeError("CUDA out of memory.")), (8, ValueError("other")), (0, None)):
            tried = []

            @find(starting_batch_size=10 if fail_above else 3)
            def run(batch_size, tag="", tried=tried, fail_above=fail_above, error=error):
                tried.append(batch_size)
                if batch_size > fail_above:
                    raise error or RuntimeError("DefaultCPUAllocator: can't allocate memory")
                return batch_size

            try:
                results.append(("returned", run(tag="x"), run(), list(tried)))
            except Exception as caught:
                results.append((type(caught).__name__, str(caught), list(tried)))
        halves = iter([3, 0])

        @find(starting_batch_size=6, reduce_batch_size_fn=lambda: next(halves))
        def custom(batch_size):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate")

        for call in (custom, lambda: custom(1)):
            try:
                call()
            except Exception as caught:
                results.append((type(caught).__name__, re.sub(r"\s+", " ", str(caught))))
        return results

    assert outcomes(fx.find_executable_batch_size) == outcomes(hf_find)


def _tensorboard_records(root: Path) -> list:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    records = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        relative = re.sub(r"\d+\.\d+", "<time>", str(path.relative_to(root)))
        if "tfevents" not in path.name:
            records.append((relative, path.read_text()))
            continue
        relative = relative.split("events.out.tfevents")[0]
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                plugin = value.metadata.plugin_data.plugin_name
                content = value.metadata.plugin_data.content if plugin == "hparams" else b""
                numbers = value.tensor.float_val or value.tensor.string_val or [value.simple_value]
                records.append((relative, event.step, value.tag, plugin, bytes(content), [str(n) for n in numbers]))
    return records


def test_tensorboard_tracker_writes_what_accelerates_writes(hf, tmp_path):
    def run(api, folder):
        accelerator = api.Accelerator(cpu=True, log_with="tensorboard", project_dir=folder)
        accelerator.init_trackers("demo", config={"lr": 0.5, "optimizer": "sgd", "epochs": 3})
        accelerator.log({"loss": 1.25, "acc": torch.tensor(0.5)}, step=1)
        accelerator.log({"note": "hello", "pair": {"a": 1.0, "b": 2.0}}, step=2)
        writer = accelerator.get_tracker("tensorboard", unwrap=True)
        accelerator.end_training()
        return type(writer).__name__, _tensorboard_records(Path(folder))

    theirs = run(hf, tmp_path / "hf")
    ours = run(fx, tmp_path / "fx")
    assert ours == theirs
    assert not any("hp_metric" in str(record) for record in ours[1])
    assert len(ours[1]) >= 6


def test_log_with_all_takes_the_trackers_accelerate_takes(hf, tmp_path, monkeypatch):
    # Accelerate's "all" is every installed tracker of its own (no CSV); wandb writes where wandb writes.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    kinds = {"TensorBoardTracker": "tensorboard", "MLFlowLogger": "mlflow", "WandbLogger": "wandb"}

    def run(api, folder, name_of):
        accelerator = api.Accelerator(cpu=True, log_with="all", project_dir=str(tmp_path / folder))
        accelerator.init_trackers("demo")
        names = sorted(name_of(tracker) for tracker in accelerator.trackers)
        accelerator.end_training()
        return names

    theirs = run(hf, "hf", lambda tracker: tracker.name)
    ours = run(fx, "fx", lambda tracker: kinds.get(type(tracker).__name__, type(tracker).__name__))
    assert ours == theirs and "wandb" in ours
    # Where wandb's own folder goes is wandb's process-wide setting (another test in this process may have set
    # it first): what is pinned is that fabricx puts it where Accelerate does, not inside project_dir.
    assert (tmp_path / "fx" / "wandb").exists() == (tmp_path / "hf" / "wandb").exists()


def test_profile_writes_accelerates_trace_files(hf, tmp_path):
    import json

    from accelerate.utils import ProfileKwargs as HFProfileKwargs

    def run(api, kwargs_class, folder):
        ready = []
        handler = kwargs_class(
            activities=["cpu"], schedule_option={"wait": 1, "warmup": 1, "active": 1}, on_trace_ready=ready.append,
            record_shapes=True, output_trace_dir=str(folder),
        )
        accelerator = api.Accelerator(cpu=True, kwargs_handlers=[handler])
        with accelerator.profile() as prof:
            for _ in range(4):
                torch.ones(8, 8).matmul(torch.ones(8, 8))
                prof.step()
        with accelerator.profile(kwargs_class(output_trace_dir=str(folder / "default"))) as plain:
            torch.ones(3).sum()
        names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.json"))
        events = json.loads((folder / "profile_0.json").read_text())["traceEvents"]
        return type(prof).__name__, type(plain).__name__, len(ready), names, len(events) > 0

    theirs = run(hf, HFProfileKwargs, tmp_path / "hf")
    ours = run(fx, fx.ProfileKwargs, tmp_path / "fx")
    assert ours == theirs
    assert theirs[2] == 1 and theirs[3] == ["default/profile_0.json", "profile_0.json"] and theirs[4]


def test_kwargs_handlers_refuse_what_they_do_not_read(hf):
    from accelerate.utils import GradScalerKwargs

    from fabricx.utilities.exceptions import MisconfigurationError

    with pytest.raises(MisconfigurationError, match="GradScalerKwargs"):
        fx.Accelerator(cpu=True, kwargs_handlers=[GradScalerKwargs()])
    with pytest.raises(ValueError, match="only pass one"):
        fx.Accelerator(cpu=True, kwargs_handlers=[fx.ProfileKwargs(), fx.ProfileKwargs()])
    # one process: DDP options have nothing to wrap, as in Accelerate; LocalSGD does nothing
    accelerator = fx.Accelerator(cpu=True, kwargs_handlers=[fx.DistributedDataParallelKwargs(comm_hook="fp16")])
    model = accelerator.prepare(nn.Linear(2, 1))
    with fx.LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=1) as local_sgd:
        local_sgd.step()
    assert not local_sgd.enabled and local_sgd.num_steps == 1


def test_process_selecting_decorators_are_accelerates(hf):
    """One process: every selection runs (Accelerate runs ``on_process(f, process_index=1)`` when alone);
    the two-process side is ``surface_checks.test_process_selection``."""
    from accelerate import PartialState as HFPartialState

    from tests.compat.accelerate_suite.surface_checks import process_selections

    theirs = process_selections(hf.Accelerator(cpu=True), HFPartialState())
    ours = process_selections(fx.Accelerator(cpu=True), fx.PartialState())
    assert ours == theirs
    assert ours["accelerator.on_process(2)"] == ["ran", [1], {}] and ours["state.on_main_process(f) is f"]
