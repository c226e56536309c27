"""The Accelerate adapter in one process: prepare, the training step, precision, export, tracking."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx.checkpoint import load_weights
from fabricx.compat.accelerate import (
    Accelerator,
    DataLoaderConfiguration,
    DistributedType,
    ProjectConfiguration,
    set_seed,
)
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError


def _data(samples=10, features=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, features, generator=generator)
    return TensorDataset(inputs, torch.randn(samples, 1, generator=generator))


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


# -- prepare ------------------------------------------------------------------------------------------


def test_prepare_keeps_order_types_and_passes_other_objects_through():
    accelerator = Accelerator(cpu=True)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = DataLoader(_data(), batch_size=4)
    marker = {"not": "prepared"}

    out = accelerator.prepare(loader, scheduler, marker, model, optimizer)

    p_loader, p_scheduler, p_marker, p_model, p_optimizer = out
    assert p_marker is marker
    assert isinstance(p_optimizer, torch.optim.SGD)
    assert isinstance(p_scheduler, torch.optim.lr_scheduler.StepLR)
    assert p_scheduler is scheduler  # same object, its class only gains the accumulation rule
    assert accelerator.unwrap_model(p_model) is model
    assert p_model(torch.zeros(2, 4)).shape == (2, 1)
    assert len(p_loader) == 3 and p_loader.total_batch_size == 4
    assert [len(x) for x, _ in p_loader] == [4, 4, 2]
    assert (
        p_scheduler.state_dict().keys()
        == torch.optim.lr_scheduler.StepLR(torch.optim.SGD(_model().parameters(), lr=0.1), step_size=1)
        .state_dict()
        .keys()
    )
    # one object in, one object out (not a tuple)
    assert accelerator.prepare(DataLoader(_data(), batch_size=2)).batch_size == 2


def test_optimizer_prepared_after_its_model_in_a_separate_call_trains():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(_model())
    optimizer = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
    before = copy.deepcopy(accelerator.unwrap_model(model).state_dict())
    accelerator.backward(model(torch.ones(3, 4)).sum())
    optimizer.step()
    after = accelerator.unwrap_model(model).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_properties_of_a_single_process_run():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    assert accelerator.device == torch.device("cpu")
    assert (accelerator.num_processes, accelerator.process_index, accelerator.local_process_index) == (1, 0, 0)
    assert accelerator.is_main_process and accelerator.is_local_main_process and accelerator.is_last_process
    assert accelerator.distributed_type == DistributedType.NO
    assert accelerator.mixed_precision == "no" and accelerator.scaler is None
    assert accelerator.gradient_accumulation_steps == 3
    assert accelerator.sync_gradients
    assert not accelerator.use_distributed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mixed_precision": "fp8"}, "fp8"),
        ({"deepspeed_plugin": object()}, r"deepspeed_plugin.*Accelerator\(strategy=DeepSpeedStrategy"),
        ({"fsdp_plugin": object()}, r"fsdp_plugin.*Accelerator\(strategy=FSDPStrategy"),
        ({"kwargs_handlers": [object()]}, r"kwargs_handlers.*Accelerator\(strategy=DDPStrategy"),
        ({"log_with": "comet_ml"}, "comet_ml"),
    ],
)
def test_unsupported_options_are_refused_with_a_reason(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        Accelerator(cpu=True, **kwargs)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError):
        Accelerator(cpu=True, not_an_option=1)


# -- precision ------------------------------------------------------------------------------------------


class _DtypeProbe(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.seen = []

    def forward(self, x):
        out = self.layer(x)
        self.seen.append(out.dtype)
        return out


def test_fp16_on_cpu_runs_with_the_cpu_grad_scaler():
    accelerator = Accelerator(cpu=True, mixed_precision="fp16")
    assert accelerator.mixed_precision == "fp16"
    assert isinstance(accelerator.scaler, torch.amp.GradScaler)
    torch.manual_seed(0)
    probe = _DtypeProbe()
    reference = copy.deepcopy(probe)
    optimizer = torch.optim.SGD(probe.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(probe, optimizer, scheduler)
    # small values, so that gradients times the initial loss scale (65536) stay finite in fp16
    x, y = torch.randn(8, 4) * 0.05, torch.randn(8, 1) * 0.05

    loss = nn.functional.mse_loss(model(x), y)
    assert probe.seen[-1] == torch.float16  # autocast really runs in fp16 on the CPU
    with accelerator.autocast():
        assert (x @ x.T).dtype == torch.float16
    accelerator.backward(loss)
    # gradients were scaled by the loss scale: unscaling brings them back to the fp32 reference
    scale = accelerator.scaler.get_scale()
    assert scale > 1
    ref_loss = nn.functional.mse_loss(reference(x), y)
    ref_loss.backward()
    raw = probe.layer.weight.grad.clone()
    assert torch.allclose(raw / scale, reference.layer.weight.grad, rtol=1e-2, atol=1e-3)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    assert not accelerator.optimizer_step_was_skipped
    assert scheduler.get_last_lr() == [0.05]

    # an overflowing step is skipped: weights, scheduler unchanged; the scale backs off
    weights = probe.layer.weight.detach().clone()
    accelerator.backward(model(x).sum() * float("inf"))
    optimizer.step()
    scheduler.step()
    assert accelerator.optimizer_step_was_skipped
    assert torch.equal(probe.layer.weight.detach(), weights)
    assert scheduler.get_last_lr() == [0.05]
    assert accelerator.scaler.get_scale() < scale


def test_bf16_autocasts_and_no_precision_is_full_precision():
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    assert accelerator.mixed_precision == "bf16" and accelerator.scaler is None
    probe = accelerator.prepare(_DtypeProbe())
    probe(torch.randn(2, 4))
    assert accelerator.unwrap_model(probe).seen[-1] == torch.bfloat16
    with accelerator.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16

    plain = Accelerator(cpu=True, mixed_precision="no")
    with plain.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


def test_mixed_precision_none_reads_accelerate_environment_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert Accelerator(cpu=True).mixed_precision == "bf16"


# -- accumulation and the step --------------------------------------------------------------------------


def _reference_accumulation(windows, lr=0.1):
    """Plain PyTorch: one SGD step per window, loss averaged over the window's real length."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    data = _data(samples=10)
    for window in windows:
        for index in window:
            x, y = data[index * 2 : index * 2 + 2]
            (nn.functional.mse_loss(model(x), y) / len(window)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


def test_accumulate_skips_steps_off_boundaries():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    loader = DataLoader(_data(samples=10), batch_size=2)  # 5 batches: windows of 2, 2 and 1
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    flags, lrs = [], []
    for step, (x, y) in enumerate(loader):
        before = copy.deepcopy(accelerator.unwrap_model(model).state_dict())
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            flags.append(accelerator.sync_gradients)
        lrs.append(scheduler.get_last_lr()[0])
        after = accelerator.unwrap_model(model).state_dict()
        changed = any(not torch.equal(before[k], after[k]) for k in before)
        assert changed == flags[-1], f"batch {step}: optimizer stepped off a boundary"
        if not flags[-1]:
            assert all(p.grad is not None for p in model.parameters()), "zero_grad ran off a boundary"
    assert flags == [False, True, False, True, True]
    assert lrs == [0.1, 0.05, 0.05, 0.025, 0.0125]  # the scheduler steps with the optimizer only


@pytest.mark.parametrize("exact", [False, True])
def test_last_partial_window_is_accelerates_by_default_and_exact_on_request(exact, monkeypatch):
    if exact:
        monkeypatch.setenv("FABRICX_ACCELERATE_EXACT_WINDOW_SCALING", "1")
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(_data(samples=10), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    got = accelerator.unwrap_model(model).state_dict()
    # fabricx's exact scaling: the single last micro-batch divided by 1, its window's real length
    right = _reference_accumulation([[0, 1], [2, 3], [4]])
    # Accelerate's arithmetic (the default): every micro-batch divided by 2, the short last one too
    halved = _model()
    opt = torch.optim.SGD(halved.parameters(), lr=0.1)
    data = _data(samples=10)
    for window in ([0, 1], [2, 3], [4]):
        for index in window:
            x, y = data[index * 2 : index * 2 + 2]
            (nn.functional.mse_loss(halved(x), y) / 2).backward()
        opt.step()
        opt.zero_grad()
    expected, other = (right, halved.state_dict()) if exact else (halved.state_dict(), right)
    assert all(torch.allclose(got[k], expected[k], atol=1e-7) for k in got)
    assert any(not torch.allclose(got[k], other[k]) for k in got)


def test_backward_outside_accumulate_divides_by_the_accumulation_steps():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
    model = accelerator.prepare(_model())
    x = torch.randn(3, 4)
    accelerator.backward(model(x).sum())
    got = [p.grad.clone() for p in model.parameters()]
    plain = _model()
    plain(x).sum().backward()
    assert all(torch.allclose(g, p.grad / 4) for g, p in zip(got, plain.parameters(), strict=True))


def test_accumulate_needs_a_prepared_model():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    with pytest.raises(FabricxError, match="prepare"), accelerator.accumulate():
        pass
    with pytest.raises(TypeError, match="prepare"), accelerator.accumulate(_model()):
        pass


def test_clip_grad_norm_and_value_match_torch():
    accelerator = Accelerator(cpu=True)
    model = _model()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(5, 4)
    accelerator.backward(model(x).pow(2).sum() * 10)
    reference(x).pow(2).sum().mul(10).backward()
    norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=0.5)
    ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=0.5)
    assert torch.allclose(norm, ref_norm)
    assert all(torch.allclose(p.grad, r.grad) for p, r in zip(model.parameters(), reference.parameters(), strict=True))
    accelerator.clip_grad_value_(model.parameters(), clip_value=0.01)
    torch.nn.utils.clip_grad_value_(reference.parameters(), 0.01)
    assert all(torch.equal(p.grad, r.grad) for p, r in zip(model.parameters(), reference.parameters(), strict=True))
    # a subset of the parameters
    first = next(iter(model.parameters()))
    first.grad.mul_(100)
    accelerator.clip_grad_norm_([first], max_norm=1e-3)
    assert torch.linalg.vector_norm(first.grad) <= 1e-3 * 1.01


def test_clipping_off_a_boundary_leaves_incomplete_gradients_alone():
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer, loader = accelerator.prepare(
        _model(), torch.optim.SGD(_model().parameters(), lr=0.1), DataLoader(_data(), batch_size=2)
    )
    del optimizer
    x, y = next(iter(loader))
    with accelerator.accumulate(model):
        accelerator.backward(nn.functional.mse_loss(model(x), y) * 1000)
        grads = [p.grad.clone() for p in model.parameters()]
        assert accelerator.clip_grad_norm_(model.parameters(), 1e-6) is None
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters(), strict=True))


# -- weights export and save --------------------------------------------------------------------------------


def test_save_model_writes_safetensors_single_and_sharded(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(_model())
    state = accelerator.unwrap_model(model).state_dict()

    accelerator.save_model(model, tmp_path / "single")
    assert sorted(p.name for p in (tmp_path / "single").iterdir()) == ["model.safetensors"]
    loaded = load_weights(tmp_path / "single")
    assert all(torch.equal(loaded[k], state[k]) for k in state)

    accelerator.save_model(model, tmp_path / "sharded", max_shard_size=100)  # bytes
    names = sorted(p.name for p in (tmp_path / "sharded").iterdir())
    # the 128-byte weight alone, the rest together
    assert "model.safetensors.index.json" in names and "model-00001-of-00002.safetensors" in names
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(state)
    loaded = load_weights(tmp_path / "sharded")
    assert all(torch.equal(loaded[k], state[k]) for k in state)

    accelerator.save_model(model, tmp_path / "strsize", max_shard_size="1KB")
    assert (tmp_path / "strsize" / "model.safetensors").is_file()  # 233 params * 4 bytes fit in 1 KB
    with pytest.raises(ValueError, match="size"):
        accelerator.save_model(model, tmp_path / "bad", max_shard_size="lots")


def test_save_model_without_safetensors_writes_pytorch_model_bin(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(_model())
    state = accelerator.unwrap_model(model).state_dict()
    accelerator.save_model(model, tmp_path / "bin", safe_serialization=False)
    loaded = torch.load(tmp_path / "bin" / "pytorch_model.bin")
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    accelerator.save_model(model, tmp_path / "bin", max_shard_size=100, safe_serialization=False)
    names = sorted(p.name for p in (tmp_path / "bin").iterdir())
    assert "pytorch_model.bin" not in names and "pytorch_model.bin.index.json" in names
    index = json.loads((tmp_path / "bin" / "pytorch_model.bin.index.json").read_text())
    merged = {}
    for shard in sorted(set(index["weight_map"].values())):
        merged.update(torch.load(tmp_path / "bin" / shard))
    assert all(torch.equal(merged[k], state[k]) for k in state)


def test_save_writes_on_the_main_process_and_works_as_a_save_function(tmp_path):
    accelerator = Accelerator(cpu=True)
    accelerator.save({"a": torch.arange(3)}, tmp_path / "obj.pt")
    assert torch.equal(torch.load(tmp_path / "obj.pt")["a"], torch.arange(3))
    accelerator.save({"w": torch.ones(2)}, tmp_path / "w.safetensors", safe_serialization=True)
    assert torch.equal(load_weights(tmp_path / "w.safetensors")["w"], torch.ones(2))
    save_function = accelerator.save  # the way transformers' save_pretrained calls it
    save_function(_model().state_dict(), str(tmp_path / "pytorch_model.bin"))
    assert (tmp_path / "pytorch_model.bin").is_file()


def test_register_for_checkpointing_refuses_objects_without_state():
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match=r"#1 \(object\)"):
        accelerator.register_for_checkpointing(_model(), object())


# -- tracking, collectives in one process, seeding ------------------------------------------------------------


def test_csv_tracker_logs_config_and_metrics(tmp_path):
    accelerator = Accelerator(cpu=True, log_with="csv", project_dir=tmp_path)
    accelerator.init_trackers("demo", config={"lr": 0.5})
    accelerator.log({"loss": 1.25}, step=3)
    accelerator.log({"loss": torch.tensor(0.5)}, step=4)
    tracker = accelerator.get_tracker("csv")
    accelerator.end_training()
    text = (tmp_path / "demo" / "version_0" / "metrics.csv").read_text()
    assert "1.25" in text and "0.5" in text
    assert "lr: 0.5" in (tmp_path / "demo" / "version_0" / "hparams.yaml").read_text()
    assert tracker is accelerator.trackers[0]


def test_tensorboard_tracker_writes_event_files(tmp_path):
    accelerator = Accelerator(
        cpu=True, log_with=["tensorboard"], project_config=ProjectConfiguration(project_dir=tmp_path)
    )
    accelerator.init_trackers("tb")
    accelerator.log({"loss": 1.0}, step=1)
    accelerator.end_training()
    assert list((tmp_path / "tb").rglob("events.out.tfevents*"))


def test_tracker_without_folder_says_what_to_pass():
    accelerator = Accelerator(cpu=True, log_with="csv")
    with pytest.raises(MisconfigurationError, match="project_dir"):
        accelerator.init_trackers("demo")


def test_single_process_collectives_return_inputs():
    accelerator = Accelerator(cpu=True)
    x = torch.arange(6).reshape(3, 2)
    assert accelerator.gather(x) is x
    assert accelerator.gather_for_metrics(x) is x
    assert accelerator.gather_for_metrics(["a", "b"]) == ["a", "b"]
    assert torch.equal(accelerator.reduce(x, "sum"), x)
    assert accelerator.pad_across_processes(x) is x
    with accelerator.split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]


def test_set_seed_repeats_random_draws():
    set_seed(123)
    first = torch.rand(3)
    set_seed(123)
    assert torch.equal(first, torch.rand(3))


def test_dataloader_configuration_is_accepted():
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    assert accelerator.dataloader_config.use_stateful_dataloader
