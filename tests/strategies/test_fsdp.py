"""FSDPStrategy on FSDP2: real gloo processes on CPU, compared with single-process training.

In order: two ranks train/check/save (``_main``), an FSDP run of world size 1 in this process loads
what they saved and saves again (``_one_rank``), two fresh ranks resume from every checkpoint
(``_resume``); the 2-rank sharded checkpoint is then consolidated and loaded without a process group.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.format import read_meta
from fabricx.strategies.fsdp import FSDPStrategy
from fabricx.utilities.exceptions import CheckpointError, FabricxError, MisconfigurationError

# Two 2-rank launches and one in-process FSDP run share one fixture; give a busy machine room.
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

TOL = 1e-6
D, H, BLOCKS, BATCH = 16, 33, 3, 8


class Block(nn.Module):
    def __init__(self, d: int = D, h: int = H) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, h: int = H, blocks: int = BLOCKS) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(D, h) for _ in range(blocks)])
        self.head = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class NeedsModel(torch.optim.SGD):
    """An optimizer whose constructor cannot be called with param groups alone."""

    def __init__(self, params: Any, model: nn.Module) -> None:
        super().__init__(params, lr=0.1)


def _net(**kwargs: Any) -> Net:
    torch.manual_seed(0)
    return Net(**kwargs)


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    # Two groups with different hyper-parameters: a rebuilt optimizer must keep them by position.
    blocks = [p for name, p in model.named_parameters() if name.startswith("blocks")]
    head = [p for name, p in model.named_parameters() if name.startswith("head")]
    return torch.optim.AdamW([{"params": blocks}, {"params": head, "lr": 0.02}], lr=0.05, weight_decay=0.1)


def _batch(step: int, micro: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + 10 * step + micro)
    x, y = torch.randn(BATCH, D, generator=g), torch.randn(BATCH, D, generator=g)
    lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
    return x[lo:hi], y[lo:hi]


def _train(
    fabric: Fabric, model: Any, optimizer: Any, steps: int, start: int = 0, micro: int = 1, clip: str | None = None,
    scheduler: Any = None,
) -> list[float]:
    norms = []
    for step in range(start, start + steps):
        for m in range(micro):
            x, y = _batch(step, m, fabric.global_rank, fabric.world_size)
            with fabric.no_backward_sync(model, enabled=m < micro - 1):
                fabric.backward(F.mse_loss(model(x), y) / micro)
        if clip == "norm":
            norms.append(float(fabric.clip_gradients(model, optimizer, max_norm=0.05)))
        elif clip == "value":
            fabric.clip_gradients(model, optimizer, clip_val=0.002)
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
    return norms


def _full(fabric: Fabric, model: Any) -> dict[str, torch.Tensor]:
    """The full state dict (rank 0 gets it; it is what the parent compares)."""
    return {k: v.detach().clone() for k, v in fabric.strategy.get_module_state_dict(fabric.unwrap(model)).items()}


def _error(fn: Any) -> str:
    try:
        fn()
    except (FabricxError, CheckpointError, MisconfigurationError) as error:
        return f"{type(error).__name__}: {error}"
    return "no error"


def _fsdp(**kwargs: Any) -> FSDPStrategy:
    return FSDPStrategy(auto_wrap_policy={Block}, **kwargs)


def _variant(fabric: Fabric, micro: int = 1, clip: str | None = None, steps: int = 2) -> tuple[dict, list[float]]:
    model = fabric.setup_module(_net())
    optimizer = fabric.setup_optimizers(_optimizer(model))
    norms = _train(fabric, model, optimizer, steps=steps, micro=micro, clip=clip)
    return _full(fabric, model), norms


# ---------------------------------------------------------------------------------------------- launch 1


def _main(fabric: Fabric, tmp: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    from torch.distributed.tensor import DTensor

    out: dict[str, Any] = {}
    rank, world = fabric.global_rank, fabric.world_size

    # setup(model, optimizer): the optimizer is rebuilt in place over the sharded parameters, so a scheduler
    # created before setup and not passed to it (as a Lightning script has it) drives the optimizer the run steps.
    model = _net()
    user_optimizer = optimizer = _optimizer(model)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, optimizer = fabric.setup(model, optimizer)
        inner = fabric.unwrap(optimizer)
        out["rebuilt"] = {
            "is_adamw": isinstance(optimizer, torch.optim.AdamW),
            "lrs": [g["lr"] for g in inner.param_groups],
            "weight_decay": [g["weight_decay"] for g in inner.param_groups],
            "all_dtensor": all(isinstance(p, DTensor) for g in inner.param_groups for p in g["params"]),
            "scheduler_follows": scheduler.optimizer is inner,
            "user_object": inner is user_optimizer,
        }
        _train(fabric, model, optimizer, steps=2, scheduler=scheduler)
    out["scheduler_warnings"] = [str(w.message) for w in caught if "lr_scheduler" in str(w.message)]
    out["lr_after"] = [g["lr"] for g in inner.param_groups]
    out["saved_weights"] = _full(fabric, model)
    out["saved_optimizer"] = copy.deepcopy(fabric.strategy.get_optimizer_state(inner))  # live tensors
    fabric.save(Path(tmp, "sharded"), {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 2})
    _train(fabric, model, optimizer, steps=2, start=2, scheduler=scheduler)
    out["uninterrupted"] = _full(fabric, model)

    # Each rank holds about half of every parameter.
    local = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    out["local_numel"] = fabric.all_gather(torch.tensor(local)).tolist()
    out["total_numel"] = total

    # Inside no_backward_sync nothing is reduce-scattered: the sharded gradients stay unset until a synced backward.
    probe = fabric.setup_module(_net())
    x, y = _batch(0, 0, rank, world)
    with fabric.no_backward_sync(probe):
        fabric.backward(F.mse_loss(probe(x), y))
    out["grads_without_sync"] = {p.grad is None for p in probe.parameters()}
    fabric.backward(F.mse_loss(probe(x), y))
    out["grads_with_sync"] = {p.grad is not None for p in probe.parameters()}

    out["plain"] = _variant(fabric)
    out["accumulated"] = _variant(fabric, micro=2)
    out["clip_norm"] = _variant(fabric, clip="norm")
    out["clip_value"] = _variant(fabric, clip="value")

    # Other layouts, each through its own Fabric joining this process group.
    for name, strategy in {
        "grad_op_ckpt_offload": _fsdp(
            sharding_strategy="SHARD_GRAD_OP", activation_checkpointing_policy={Block}, cpu_offload=True
        ),
        "hybrid_replicate": _fsdp(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 1)),
        "hybrid_shard": _fsdp(sharding_strategy="HYBRID_SHARD", device_mesh=(1, 2)),
        "no_shard": _fsdp(sharding_strategy="NO_SHARD"),
    }.items():
        other = Fabric(accelerator="cpu", devices=world, strategy=strategy)
        weights, _ = _variant(other, micro=2, steps=1)
        model_other = other.setup_module(_net())
        out[name] = (weights, sum(p.to_local().numel() for p in model_other.parameters()))

    # bf16-mixed: bf16 compute on gathered parameters, float32 shards and gradients.
    bf16 = Fabric(accelerator="cpu", devices=world, strategy=_fsdp(), precision="bf16-mixed")
    model_bf = bf16.setup_module(_net())
    seen: dict[str, Any] = {}
    fc1 = bf16.unwrap(model_bf).blocks[0].fc1
    fc1.register_forward_hook(lambda m, i, o: seen.update(weight=m.weight.dtype, out=o.dtype))
    x, y = _batch(0, 0, rank, world)
    prediction = model_bf(x)
    bf16.backward(F.mse_loss(prediction, y))
    out["bf16"] = {
        "precision": type(bf16.precision).__name__,
        "compute_weight": str(seen["weight"]),
        "compute_out": str(seen["out"]),
        "output": str(prediction.dtype),
        "shards": sorted({str(p.to_local().dtype) for p in model_bf.parameters()}),
        "dtensor": all(isinstance(p, DTensor) for p in model_bf.parameters()),
        "grads": sorted({str(p.grad.to_local().dtype) for p in model_bf.parameters()}),
    }

    # 16-mixed: fp16 compute, loss scaling whose inf check spans the shards of all ranks.
    fp16 = Fabric(accelerator="cpu", devices=world, strategy=_fsdp(), precision="16-mixed")
    model_16 = fp16.setup_module(_net())
    optimizer_16 = fp16.setup_optimizers(torch.optim.AdamW(model_16.parameters(), lr=0.01, eps=1e-4))
    before = _full(fp16, model_16)
    fp16.backward(F.mse_loss(model_16(x), y))
    fp16.clip_gradients(model_16, optimizer_16, max_norm=1.0)
    optimizer_16.step()
    out["fp16"] = (type(fp16.precision.scaler).__name__, before, _full(fp16, model_16))

    # The full-state-dict checkpoint type.
    full = Fabric(accelerator="cpu", devices=world, strategy=_fsdp(state_dict_type="full"))
    model_full = full.setup_module(_net())
    optimizer_full = full.setup_optimizers(_optimizer(model_full))
    scheduler_full = torch.optim.lr_scheduler.StepLR(optimizer_full, step_size=1, gamma=0.5)
    _train(full, model_full, optimizer_full, steps=2, scheduler=scheduler_full)
    full.save(Path(tmp, "full"), {"model": model_full, "optimizer": optimizer_full, "scheduler": scheduler_full,
                                  "step": 2})

    # Several FSDP models and optimizers in one checkpoint, restored into fresh ones.
    a, b = fabric.setup_module(_net()), fabric.setup_module(_net(h=9, blocks=1))
    opt_a, opt_b = fabric.setup_optimizers(_optimizer(a), _optimizer(b))
    _train(fabric, a, opt_a, steps=1)
    _train(fabric, b, opt_b, steps=1)
    fabric.save(Path(tmp, "two"), {"a": a, "b": b, "opt_a": opt_a, "opt_b": opt_b})
    expected = (_full(fabric, a), _full(fabric, b), fabric.strategy.get_optimizer_state(fabric.unwrap(opt_b)))
    a2, b2 = fabric.setup_module(_net(blocks=BLOCKS)), fabric.setup_module(_net(h=9, blocks=1))
    opt_a2, opt_b2 = fabric.setup_optimizers(_optimizer(a2), _optimizer(b2))
    remainder = fabric.load(Path(tmp, "two"), {"a": a2, "b": b2, "opt_a": opt_a2, "opt_b": opt_b2})
    got = (_full(fabric, a2), _full(fabric, b2), fabric.strategy.get_optimizer_state(fabric.unwrap(opt_b2)))
    out["two_models"] = (expected, got, sorted(remainder))

    # Collectives are those of the world group, untouched by sharding.
    out["all_gather"] = fabric.all_gather(torch.tensor([rank] * (rank + 1)))
    out["all_reduce"] = fabric.all_reduce(torch.tensor(float(rank + 1)), reduce_op="sum")

    # Misuse.
    stepped_model = _net()
    stepped = torch.optim.Adam(stepped_model.parameters())
    stepped_model(torch.ones(1, D)).sum().backward()
    stepped.step()
    out["error_stepped"] = _error(lambda: fabric.setup(stepped_model, stepped))
    early_model = _net()
    early = torch.optim.SGD(early_model.parameters(), lr=0.1)
    early_model = fabric.setup_module(early_model)
    out["error_early"] = _error(lambda: fabric.setup_optimizers(early))
    odd_model = _net()
    out["error_unbuildable"] = _error(lambda: fabric.setup(odd_model, NeedsModel(odd_model.parameters(), odd_model)))
    return out


# ------------------------------------------------------------------------------------- one process


def _one_rank(tmp: str) -> dict[str, Any]:
    """One FSDP process (this one): load the 2-rank checkpoints, continue, and save a 1-rank checkpoint."""
    fabric = Fabric(accelerator="cpu", devices=1, strategy=_fsdp(timeout=60))
    try:
        out = {}
        for kind in ("sharded", "full"):
            model = fabric.setup_module(_net(h=H))
            optimizer = fabric.setup_optimizers(_optimizer(model))
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 0}
            fabric.load(Path(tmp, kind), state)
            out[f"{kind}_loaded"] = _full(fabric, model)
            if kind == "sharded":
                fabric.save(Path(tmp, "one_rank"), state)
            _train(fabric, model, optimizer, steps=2, start=state["step"], scheduler=scheduler)
            out[f"{kind}_resumed"] = _full(fabric, model)
        return out
    finally:
        fabric._teardown()  # the process group of this test process must not outlive the check


# ---------------------------------------------------------------------------------------------- launch 2


def _resume(fabric: Fabric, tmp: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name in ("sharded", "full", "one_rank"):
        model = fabric.setup_module(_net())
        optimizer = fabric.setup_optimizers(_optimizer(model))
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 0}
        fabric.load(Path(tmp, name), state)
        _train(fabric, model, optimizer, steps=2, start=state["step"], scheduler=scheduler)
        out[name] = (state["step"], _full(fabric, model))

    with fabric.init_module(empty_init=True):
        empty = Net()
    meta_before = all(p.is_meta for p in empty.parameters())
    empty = fabric.setup_module(empty)
    fabric.load(Path(tmp, "sharded"), {"model": empty})
    out["empty_init"] = (meta_before, _full(fabric, empty))

    for name in ("sharded", "full"):
        wrong = fabric.setup_module(_net(h=20))
        out[f"mismatch_{name}"] = _error(lambda n=name, w=wrong: fabric.load(Path(tmp, n), {"model": w}))
        bigger = fabric.setup_module(_net(blocks=BLOCKS + 1))
        out[f"strict_{name}"] = _error(lambda n=name, b=bigger: fabric.load(Path(tmp, n), {"model": b}))
        fabric.load(Path(tmp, name), {"model": bigger}, strict=False)
        out[f"partial_{name}"] = _full(fabric, bigger)
    out["everything"] = sorted(fabric.load(Path(tmp, "sharded")))
    return out


# ---------------------------------------------------------------------------------------------- the tests


def _reference(micro: int = 1, clip: str | None = None, steps: int = 2) -> tuple[dict, list[float]]:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(_net())
    optimizer = fabric.setup_optimizers(_optimizer(model))
    norms = _train(fabric, model, optimizer, steps=steps, micro=micro, clip=clip)
    return {k: v.clone() for k, v in fabric.unwrap(model).state_dict().items()}, norms


def _reference_with_scheduler(steps: int) -> dict[str, torch.Tensor]:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(_net())
    optimizer = fabric.setup_optimizers(_optimizer(model))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    _train(fabric, model, optimizer, steps=steps, scheduler=scheduler)
    return {k: v.clone() for k, v in fabric.unwrap(model).state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b), (sorted(a), sorted(b))
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = str(tmp_path_factory.mktemp("fsdp"))
    main = Fabric(accelerator="cpu", devices=2, strategy=_fsdp(start_method="spawn", timeout=60)).launch(_main, tmp)
    one = _one_rank(tmp)
    resume = Fabric(accelerator="cpu", devices=2, strategy=_fsdp(start_method="spawn", timeout=60)).launch(
        _resume, tmp
    )
    return {"main": main, "one": one, "resume": resume, "tmp": tmp}


def test_matches_single_process_training(runs: dict[str, Any]) -> None:
    main = runs["main"]
    for name, kwargs in {"plain": {}, "accumulated": {"micro": 2}, "clip_norm": {"clip": "norm"},
                         "clip_value": {"clip": "value"}}.items():
        expected, expected_norms = _reference(**kwargs)
        weights, norms = main[name]
        assert _max_diff(expected, weights) < TOL, name
        assert norms == pytest.approx(expected_norms, abs=1e-6), name
    assert main["grads_without_sync"] == {True} and main["grads_with_sync"] == {True}
    # the clipping really clipped (the norm is far above max_norm), and accumulation changed the result
    assert min(main["clip_norm"][1]) > 0.5
    assert _max_diff(main["plain"][0], main["accumulated"][0]) > 1e-3
    assert _max_diff(main["plain"][0], main["clip_value"][0]) > 1e-4


def test_other_sharding_layouts_match_single_process(runs: dict[str, Any]) -> None:
    expected, _ = _reference(micro=2, steps=1)
    total = runs["main"]["total_numel"]
    local = {}
    for name in ("grad_op_ckpt_offload", "hybrid_replicate", "hybrid_shard", "no_shard"):
        weights, local[name] = runs["main"][name]
        assert _max_diff(expected, weights) < TOL, name
    assert local["hybrid_replicate"] == local["no_shard"] == total
    assert local["hybrid_shard"] < 0.55 * total


def test_each_rank_holds_about_half(runs: dict[str, Any]) -> None:
    local, total = runs["main"]["local_numel"], runs["main"]["total_numel"]
    assert sum(local) == total
    assert all(0.45 * total <= n <= 0.55 * total for n in local), (local, total)


def test_setup_rebuilds_optimizer_and_scheduler(runs: dict[str, Any]) -> None:
    main = runs["main"]
    assert main["rebuilt"] == {
        "is_adamw": True, "lrs": [0.05, 0.02], "weight_decay": [0.1, 0.1], "all_dtensor": True,
        "scheduler_follows": True, "user_object": True,
    }
    assert main["lr_after"] == [0.05 / 4, 0.02 / 4]
    assert main["scheduler_warnings"] == []


def test_bf16_mixed_computes_in_bf16_on_fp32_shards(runs: dict[str, Any]) -> None:
    assert runs["main"]["bf16"] == {
        "precision": "FSDPPrecision",
        "compute_weight": "torch.bfloat16",
        "compute_out": "torch.bfloat16",
        "output": "torch.float32",
        "shards": ["torch.float32"],
        "dtensor": True,
        "grads": ["torch.float32"],
    }


def test_16_mixed_steps_with_a_sharded_grad_scaler(runs: dict[str, Any]) -> None:
    scaler, before, after = runs["main"]["fp16"]
    assert scaler == "ShardedGradScaler"
    assert all(torch.isfinite(t).all() for t in after.values())
    assert _max_diff(before, after) > 1e-4  # the step was taken, not skipped


def test_collectives_are_untouched(runs: dict[str, Any]) -> None:
    gathered = runs["main"]["all_gather"]
    assert [t.tolist() for t in gathered] == [[0], [1, 1]]
    assert runs["main"]["all_reduce"].item() == 3.0


def test_misuse_gives_clear_errors(runs: dict[str, Any]) -> None:
    main = runs["main"]
    assert main["error_stepped"].startswith("FabricxError") and "already taken steps" in main["error_stepped"]
    assert main["error_early"].startswith("FabricxError") and "setup_module" in main["error_early"]
    assert main["error_unbuildable"].startswith("FabricxError") and "NeedsModel" in main["error_unbuildable"]


def test_unknown_options_are_refused() -> None:
    with pytest.raises(MisconfigurationError, match="sharding_strategy='ZERO_9'"):
        FSDPStrategy(sharding_strategy="ZERO_9")
    with pytest.raises(MisconfigurationError, match="state_dict_type"):
        FSDPStrategy(state_dict_type="pickle")
    with pytest.raises(MisconfigurationError, match="unknown option"):
        FSDPStrategy(reshard_everything=True)
    with pytest.raises(MisconfigurationError, match="device_mesh"):
        FSDPStrategy(device_mesh=(2, 0))
    with pytest.raises(MisconfigurationError, match="auto_wrap_policy"):
        FSDPStrategy(auto_wrap_policy={"Block"})
    with pytest.raises(MisconfigurationError, match="MixedPrecisionPolicy"):
        FSDPStrategy(mixed_precision="bf16")
    from fabricx.precision.amp import MixedPrecision

    with pytest.raises(MisconfigurationError, match="FSDPPrecision"):
        Fabric(accelerator="cpu", devices=2, strategy=FSDPStrategy(), plugins=MixedPrecision("bf16-mixed", "cpu"))


def test_checkpoint_layouts_on_disk(runs: dict[str, Any]) -> None:
    tmp = Path(runs["tmp"])
    sharded = read_meta(tmp / "sharded")
    assert sharded["world_size"] == 2
    assert sharded["extra_meta"]["fabricx_sharded"]["entries"] == {"model": "model", "optimizer": "optimizer"}
    assert {p.name for p in (tmp / "sharded" / "sharded").iterdir()} >= {".metadata", "__0_0.distcp", "__1_0.distcp"}
    assert read_meta(tmp / "full")["extra_meta"] is None
    assert (tmp / "full" / "shared.safetensors").stat().st_size > 4 * runs["main"]["total_numel"]
    assert read_meta(tmp / "one_rank")["world_size"] == 1


def test_resume_matches_uninterrupted_run(runs: dict[str, Any]) -> None:
    uninterrupted = runs["main"]["uninterrupted"]
    assert _max_diff(uninterrupted, _reference_with_scheduler(4)) < TOL
    for name in ("sharded", "full", "one_rank"):  # saved by 2 ranks, 2 ranks (full), 1 rank
        step, weights = runs["resume"][name]
        assert step == 2
        assert _max_diff(uninterrupted, weights) < TOL, name
    # same layout, same shards: bit for bit
    assert _max_diff(uninterrupted, runs["resume"]["sharded"][1]) == 0.0


def test_one_process_loads_two_rank_checkpoints(runs: dict[str, Any]) -> None:
    one, saved = runs["one"], runs["main"]["saved_weights"]
    assert _max_diff(saved, one["sharded_loaded"]) == 0.0
    assert _max_diff(one["full_loaded"], saved) < TOL  # the full run trained in its own Fabric
    assert _max_diff(runs["main"]["uninterrupted"], one["sharded_resumed"]) < TOL
    assert _max_diff(runs["main"]["uninterrupted"], one["full_resumed"]) < TOL


def test_empty_init_then_load_gives_saved_weights(runs: dict[str, Any]) -> None:
    meta_before, weights = runs["resume"]["empty_init"]
    assert meta_before
    assert _max_diff(runs["main"]["saved_weights"], weights) == 0.0


def test_several_models_in_one_checkpoint(runs: dict[str, Any]) -> None:
    (a, b, opt_b), (a2, b2, opt_b2), remainder = runs["main"]["two_models"]
    assert _max_diff(a, a2) == 0.0 and _max_diff(b, b2) == 0.0
    assert opt_b["param_groups"] == opt_b2["param_groups"]
    assert set(opt_b["state"]) == set(opt_b2["state"]) == set(range(len(opt_b["state"])))
    for index, values in opt_b["state"].items():
        for key, value in values.items():
            assert torch.equal(value, opt_b2["state"][index][key]), (index, key)
    assert remainder == []


def test_shape_mismatch_and_strict_loading(runs: dict[str, Any]) -> None:
    resume = runs["resume"]
    for name in ("sharded", "full"):
        assert resume[f"mismatch_{name}"].startswith("CheckpointError"), resume[f"mismatch_{name}"]
        assert "blocks.0.fc1.weight: checkpoint (33, 16), model (20, 16)" in resume[f"mismatch_{name}"]
        assert resume[f"strict_{name}"].startswith("CheckpointError") and "blocks.3" in resume[f"strict_{name}"]
        partial, saved = resume[f"partial_{name}"], runs["main"]["saved_weights"]
        assert _max_diff({k: saved[k] for k in saved if k.startswith("blocks.0")},
                         {k: partial[k] for k in saved if k.startswith("blocks.0")}) < TOL
    assert resume["everything"] == ["model", "optimizer", "scheduler", "step"]


def test_lightning_style_arguments_are_understood() -> None:
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    strategy = FSDPStrategy(
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        cpu_offload=CPUOffload(offload_params=True),
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    )
    assert strategy.sharding_strategy == "SHARD_GRAD_OP" and strategy.cpu_offload
    assert strategy._wrap_policy(Block()) and not strategy._wrap_policy(nn.Linear(1, 1))
    assert strategy._mixed_precision.param_dtype == torch.bfloat16
    with pytest.warns(UserWarning, match="use_orig_params"):
        FSDPStrategy(use_orig_params=True)


def test_registry_names_build_fsdp() -> None:
    from fabricx.strategies.registry import create_strategy

    assert isinstance(create_strategy("fsdp"), FSDPStrategy)
    offload = create_strategy("fsdp_cpu_offload")
    assert offload.cpu_offload and offload.state_dict_type == "sharded"


def test_consolidated_checkpoint_loads_without_process_group(runs: dict[str, Any]) -> None:
    from fabricx.checkpoint.consolidate import consolidate_checkpoint
    from fabricx.checkpoint.format import read_checkpoint

    written = consolidate_checkpoint(Path(runs["tmp"], "sharded"))
    assert written == Path(runs["tmp"], "sharded.consolidated")
    shared = read_checkpoint(written).shared
    assert _max_diff(runs["main"]["saved_weights"], shared["model"]) == 0.0
    saved_optimizer = runs["main"]["saved_optimizer"]
    assert shared["optimizer"]["param_groups"] == saved_optimizer["param_groups"]
    for index, values in saved_optimizer["state"].items():
        for key, value in values.items():
            assert torch.equal(value, shared["optimizer"]["state"][index][key]), (index, key)
    # a plain single-process Fabric resumes from it and matches the uninterrupted 2-rank run
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(Net())
    optimizer = fabric.setup_optimizers(_optimizer(model))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "step": 0}
    fabric.load(written, state)
    _train(fabric, model, optimizer, steps=2, start=state["step"], scheduler=scheduler)
    assert _max_diff(runs["main"]["uninterrupted"], fabric.unwrap(model).state_dict()) < TOL
