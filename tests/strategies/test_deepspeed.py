"""DeepSpeedStrategy with the real DeepSpeed engine on CPU (gloo, 2 processes).

Each 2-process launch costs several seconds (spawn, importing deepspeed), so the checks are grouped:
one launch trains ZeRO 1/2/3 against DDP, checks clipping, both accumulation styles, the error
messages, a two-model GAN and saves a ZeRO-3 run; a fresh launch resumes it; a third trains in bf16.
The spawned functions live at module level so that the children can import them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(__file__).resolve().parents[2] / ".cache" / "torch_extensions"))

import pytest
import torch
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits, mse_loss
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.checkpoint.deepspeed_consolidate import (
    consolidate_deepspeed_checkpoint,
    deepspeed_model_states,
)
from fabricx.checkpoint.format import read_meta
from fabricx.precision.amp import MixedPrecision
from fabricx.precision.deepspeed import DeepSpeedPrecision
from fabricx.strategies.deepspeed import DeepSpeedStrategy
from fabricx.strategies.deepspeed import config as ds_config
from fabricx.strategies.registry import create_strategy
from fabricx.utilities.exceptions import FabricxError, MisconfigurationError

pytestmark = [pytest.mark.deepspeed, pytest.mark.distributed]

STEPS = 10
PER_RANK = 4
LR = 0.05
TIMEOUT = 120


# -- workloads shared by the children ---------------------------------------------------------------------
def _net(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(4, 8), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(8, 1))
    return nn.Sequential(*layers)


def _batch(index: int, rank: int, world: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + index)
    x = torch.randn(PER_RANK * world, 4, generator=generator)
    y = torch.randn(PER_RANK * world, 1, generator=generator)
    rows = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    return x[rows], y[rows]


def _ddp_reference(rank: int, micro_batches: int, accumulate: int = 1, clip: float | None = None) -> dict:
    """Plain torch DDP on the same data: what every ZeRO stage must reproduce."""
    model = _net()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    norms = []
    for index in range(micro_batches):
        x, y = _batch(index, rank)
        boundary = (index + 1) % accumulate == 0
        with contextlib.nullcontext() if boundary else ddp.no_sync():
            (mse_loss(ddp(x), y) / accumulate).backward()
        if boundary:
            if clip is not None:
                norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip)))
            optimizer.step()
            optimizer.zero_grad()
    return {"state": {k: v.detach().clone() for k, v in model.state_dict().items()}, "norms": norms}


def _set_engine_settings(fabric: Fabric, stage: int, **settings: Any) -> None:
    """Point the strategy's config (read when the next engine is built) at a stage and settings."""
    config = fabric.strategy.config
    config["zero_optimization"]["stage"] = stage
    for key in ("gradient_clipping", "gradient_accumulation_steps"):
        config.pop(key, None)
    config.update(settings)


def _full_state(fabric: Fabric, model: nn.Module) -> dict[str, torch.Tensor]:
    return fabric.strategy.get_module_state_dict(fabric.unwrap(model))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(float((a[k].detach().float() - b[k].detach().float()).abs().max()) for k in a)


def _train_deepspeed(fabric: Fabric, micro_batches: int, accumulation: str | None = None) -> dict:
    model = _net()
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=LR))
    for index in range(micro_batches):
        x, y = _batch(index, fabric.global_rank)
        context = fabric.accumulate(model) if accumulation == "fabric" else contextlib.nullcontext()
        with context:
            fabric.backward(mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    return _full_state(fabric, model)


def _expect_error(kind: type[BaseException], function: Any) -> str:
    try:
        function()
    except kind as error:
        return str(error)
    return "<no error>"


# -- launch 1: equivalence, engine settings, errors, GAN, ZeRO-3 init and the run to resume ---------------
def _main_checks(fabric: Fabric, ckpt_dir: str) -> dict:
    torch.set_num_threads(1)
    rank = fabric.global_rank
    out: dict[str, Any] = {}

    # ZeRO 1, 2, 3 in fp32 against DDP after 10 steps.
    reference = _ddp_reference(rank, STEPS)["state"]
    for stage in (1, 2, 3):
        _set_engine_settings(fabric, stage)
        out[f"zero{stage}_vs_ddp"] = _max_diff(_train_deepspeed(fabric, STEPS), reference)

    # Gradient clipping through the engine's own setting, against DDP + clip_grad_norm_.
    clip = 0.05
    clipped = _ddp_reference(rank, STEPS, clip=clip)
    out["clip_min_norm"] = min(clipped["norms"])
    _set_engine_settings(fabric, 2, gradient_clipping=clip)
    out["clip_vs_ddp"] = _max_diff(_train_deepspeed(fabric, STEPS), clipped["state"])
    out["unclipped_vs_clipped"] = _max_diff(reference, clipped["state"])

    # Gradient accumulation: by the engine (gradient_accumulation_steps=2, step every micro-batch) and by
    # Fabric(grad_accum_steps=2) with fabric.accumulate; both must equal DDP accumulating 2 micro-batches.
    accumulated = _ddp_reference(rank, 2 * STEPS, accumulate=2)["state"]
    _set_engine_settings(fabric, 2, gradient_accumulation_steps=2)
    out["engine_accum_vs_ddp"] = _max_diff(_train_deepspeed(fabric, 2 * STEPS), accumulated)
    for stage in (1, 2, 3):
        _set_engine_settings(fabric, stage)
        state = _train_deepspeed(fabric, 2 * STEPS, accumulation="fabric")
        out[f"fabric_accum_zero{stage}_vs_ddp"] = _max_diff(state, accumulated)

    # Errors a user can act on.
    _set_engine_settings(fabric, 2)
    model = _net()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=LR))
    x, y = _batch(0, rank)
    out["optimizer_keeps_class"] = isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["lr"] == LR
    out["direct_backward"] = _expect_error(FabricxError, lambda: mse_loss(model(x), y).backward())
    out["clip_call"] = _expect_error(
        MisconfigurationError, lambda: fabric.clip_gradients(model, optimizer, max_norm=1.0)
    )
    other = _net()
    out["two_optimizers"] = _expect_error(
        FabricxError,
        lambda: fabric.setup(other, torch.optim.SGD(other.parameters(), lr=1), torch.optim.SGD(other.parameters())),
    )
    inference = fabric.setup_module(_net())  # an engine without optimizer: forward only
    out["inference_forward"] = tuple(inference(x).shape)
    out["inference_backward"] = _expect_error(
        FabricxError, lambda: fabric.backward(inference(x).sum(), model=inference)
    )
    out["setup_optimizers"] = _expect_error(
        FabricxError, lambda: fabric.setup_optimizers(torch.optim.SGD(inference.parameters(), lr=LR))
    )
    _set_engine_settings(fabric, 2, gradient_accumulation_steps=2)
    engine_model = _net()
    engine_model, _ = fabric.setup(engine_model, torch.optim.SGD(engine_model.parameters(), lr=LR))

    def accumulate_twice() -> None:
        with fabric.no_backward_sync(engine_model):
            fabric.backward(mse_loss(engine_model(x), y))

    out["double_accumulation"] = _expect_error(FabricxError, accumulate_twice)

    # Two models (a GAN), each set up with its own optimizer, against one process on the full batch.
    _set_engine_settings(fabric, 2)
    out.update(_gan_check(fabric))

    # ZeRO-3: init_module(empty_init=True) builds the model partitioned; train with a stateful loader,
    # dropout (random state) and AdamW, saving at step 5 and 10.
    _set_engine_settings(fabric, 3)
    out.update(_resumable_run(fabric, Path(ckpt_dir), start=None))
    return out


def _gan_check(fabric: Fabric) -> dict:
    def build() -> tuple[nn.Module, nn.Module]:
        torch.manual_seed(3)
        generator = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 4))
        discriminator = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        return generator, discriminator

    def data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(7 + step)
        return torch.randn(2 * PER_RANK, 2, generator=generator), torch.randn(2 * PER_RANK, 4, generator=generator)

    def gan_steps(gen: nn.Module, disc: nn.Module, opt_g: Any, opt_d: Any, backward: Any, rows: slice) -> None:
        for step in range(3):
            z, real = data(step)
            z, real = z[rows], real[rows]
            ones, zeros = torch.ones(len(z), 1), torch.zeros(len(z), 1)
            loss_d = binary_cross_entropy_with_logits(disc(real), ones) + binary_cross_entropy_with_logits(
                disc(gen(z).detach()), zeros
            )
            backward(loss_d, disc)
            opt_d.step()
            opt_d.zero_grad()
            disc.requires_grad_(False)
            backward(binary_cross_entropy_with_logits(disc(gen(z)), ones), gen)
            disc.requires_grad_(True)
            opt_g.step()
            opt_g.zero_grad()

    ref_g, ref_d = build()
    ref_opt_g, ref_opt_d = torch.optim.SGD(ref_g.parameters(), lr=0.5), torch.optim.SGD(ref_d.parameters(), lr=0.5)
    gan_steps(ref_g, ref_d, ref_opt_g, ref_opt_d, lambda loss, _: loss.backward(), slice(None))

    gen, disc = build()
    gen, opt_g = fabric.setup(gen, torch.optim.SGD(gen.parameters(), lr=0.5))
    disc, opt_d = fabric.setup(disc, torch.optim.SGD(disc.parameters(), lr=0.5))
    z, _ = data(0)
    without_model = _expect_error(FabricxError, lambda: fabric.backward(gen(z).sum()))
    rank = fabric.global_rank
    rows = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    gan_steps(gen, disc, opt_g, opt_d, lambda loss, model: fabric.backward(loss, model=model), rows)
    return {
        "gan_backward_without_model": without_model,
        "gan_generator_vs_reference": _max_diff(_full_state(fabric, gen), ref_g.state_dict()),
        "gan_discriminator_vs_reference": _max_diff(_full_state(fabric, disc), ref_d.state_dict()),
    }


def _resumable_run(fabric: Fabric, ckpt_dir: Path, start: str | None) -> dict:
    """Train to step 10 (from scratch, saving at 5 and 10, or resuming from ``start``)."""
    generator = torch.Generator().manual_seed(5)
    dataset = TensorDataset(torch.randn(48, 4, generator=generator), torch.randn(48, 1, generator=generator))
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=PER_RANK, shuffle=True))
    with fabric.init_module(empty_init=True):
        model = _net(dropout=0.3)
    parameters = list(model.parameters())
    out: dict[str, Any] = {
        "partitioned": all(hasattr(p, "ds_id") and p.numel() == 0 for p in parameters),
        "full_numel": sum(int(p.ds_numel) for p in parameters if hasattr(p, "ds_id")),
    }
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=LR))
    state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0, "note": "before"}
    if start is not None:
        remainder = fabric.load(ckpt_dir / start, state)
        out["loaded_step"] = state["step"]
        out["loaded_note"] = state["note"]
        out["remainder"] = sorted(remainder)
    losses = []
    while state["step"] < STEPS:
        for x, y in loader:
            loss = mse_loss(model(x), y)
            fabric.backward(loss, model=model)  # earlier models of this launch may await a backward
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss))
            state["step"] += 1
            if start is None and state["step"] in (5, STEPS):
                state["note"] = f"saved at {state['step']}"
                fabric.save(ckpt_dir / f"step_{state['step']}", {**state, "extra": torch.arange(3)})
            if state["step"] == STEPS:
                break
    out["final"] = _full_state(fabric, model)
    out["losses"] = losses
    return out


# -- launch 2: resume in fresh processes ----------------------------------------------------------------------
def _resume_checks(fabric: Fabric, ckpt_dir: str) -> dict:
    torch.set_num_threads(1)
    out = _resumable_run(fabric, Path(ckpt_dir), start="step_5")
    # The model alone (no optimizer in the state) loads from the step-10 checkpoint too.
    with fabric.init_module(empty_init=True):
        fresh = _net(dropout=0.3)
    fresh, _ = fabric.setup(fresh, torch.optim.AdamW(fresh.parameters(), lr=LR))
    remainder = fabric.load(Path(ckpt_dir) / "step_10", {"model": fresh})
    out["model_only"] = _full_state(fabric, fresh)
    out["model_only_remainder"] = sorted(remainder)
    # Without a state, load returns everything: fabricx's values and the model's consolidated weights.
    everything = fabric.load(Path(ckpt_dir) / "step_10")
    out["everything_keys"] = sorted(everything)
    out["everything_model"] = everything["model"]
    return out


# -- launch 3: bf16 under ZeRO-2 ------------------------------------------------------------------------------
def _bf16_checks(fabric: Fabric, ckpt_dir: str) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=0.02))
    generator = torch.Generator().manual_seed(fabric.global_rank)
    weights = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    losses = []
    for _ in range(40):
        x = torch.randn(16, 4, generator=generator)
        output = model(x)
        loss = mse_loss(output, x @ weights)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss))
    fabric.save(Path(ckpt_dir) / "bf16", {"model": model, "optimizer": optimizer})
    state = {k: v.detach().float().clone() for k, v in _full_state(fabric, model).items()}
    fabric.strategy.teardown()  # releases the engines and the process group
    return {
        "group_after_teardown": torch.distributed.is_initialized(),
        "losses": losses,
        "param_dtypes": sorted({str(p.dtype) for p in fabric.unwrap(model).parameters()}),
        "output_dtype": str(output.dtype),
        "master_dtypes": sorted({str(p.dtype) for g in optimizer.param_groups for p in g["params"]}),
        "state": state,
    }


def _strategy(**kwargs: Any) -> DeepSpeedStrategy:
    return DeepSpeedStrategy(start_method="spawn", timeout=TIMEOUT, **kwargs)


def test_zero_stages_match_ddp_resume_and_consolidate(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy=_strategy(stage=2), grad_accum_steps=2)
    out = fabric.launch(_main_checks, str(tmp_path))

    distances = {key: value for key, value in out.items() if "_vs_" in key}
    for stage in (1, 2, 3):
        assert out[f"zero{stage}_vs_ddp"] < 1e-5, distances
        assert out[f"fabric_accum_zero{stage}_vs_ddp"] < 1e-5, distances
    assert out["clip_min_norm"] > 0.05  # clipping really changed every step
    assert out["unclipped_vs_clipped"] > 1e-3
    assert out["clip_vs_ddp"] < 1e-5
    assert out["engine_accum_vs_ddp"] < 1e-5
    assert out["optimizer_keeps_class"]
    assert "fabric.backward(loss)" in out["direct_backward"]
    assert "gradient_clipping=1.0" in out["clip_call"]
    assert "own optimizer" in out["two_optimizers"]
    assert "gradient_accumulation_steps=2" in out["double_accumulation"]
    assert out["inference_forward"] == (PER_RANK, 1)
    assert "without an optimizer" in out["inference_backward"]
    assert "fabric.setup(model, optimizer)" in out["setup_optimizers"]
    assert "model=" in out["gan_backward_without_model"]
    assert out["gan_generator_vs_reference"] < 1e-5
    assert out["gan_discriminator_vs_reference"] < 1e-5
    assert out["partitioned"], "init_module(empty_init=True) under ZeRO-3 did not partition the parameters"
    assert out["full_numel"] == 4 * 8 + 8 + 8 + 1

    # The checkpoint: fabricx's files plus the engine's shards under deepspeed/model/.
    ckpt = tmp_path / "step_10"
    meta = read_meta(ckpt)
    assert meta["extra_meta"]["deepspeed"] == {
        "zero_stage": 3,
        "elastic_checkpoint": False,  # ZeRO-3 shards cannot be re-cut for another process count
        "models": {"model": {"optimizer": "optimizer"}},
    }
    shards = sorted(p.name for p in (ckpt / "deepspeed" / "model").iterdir())
    assert any("optim_states" in name for name in shards), shards
    assert (ckpt / "rank_0.json").exists() and (ckpt / "rank_1.json").exists()

    resumed = Fabric(accelerator="cpu", devices=2, strategy=_strategy(stage=3)).launch(_resume_checks, str(tmp_path))
    assert resumed["loaded_step"] == 5 and resumed["loaded_note"] == "saved at 5"
    assert resumed["remainder"] == ["extra"]
    assert resumed["losses"] == out["losses"][5:], "the resumed run saw other data or other dropout masks"
    assert _max_diff(resumed["final"], out["final"]) == 0.0
    assert _max_diff(resumed["model_only"], out["final"]) == 0.0
    assert resumed["model_only_remainder"] == ["extra", "note", "step"]  # fabricx values it did not restore

    # Consolidation to one fp32 state dict that a plain model loads.
    consolidated = consolidate_deepspeed_checkpoint(ckpt)
    plain = _net(dropout=0.3)
    plain.load_state_dict(consolidated)
    assert all(t.dtype == torch.float32 for t in consolidated.values())
    assert _max_diff(plain.state_dict(), out["final"]) == 0.0
    assert deepspeed_model_states(ckpt).keys() == {"model"}
    # `fabricx consolidate` turns it into a plain fabricx checkpoint any strategy loads.
    from fabricx.checkpoint.consolidate import consolidate_checkpoint
    from fabricx.checkpoint.format import read_checkpoint

    merged = read_checkpoint(consolidate_checkpoint(ckpt, tmp_path / "merged"))
    assert _max_diff(merged.shared["model"], out["final"]) == 0.0
    assert merged.shared["step"] == 10
    assert resumed["everything_keys"] == ["extra", "loader", "model", "note", "step"]
    assert _max_diff(resumed["everything_model"], out["final"]) == 0.0


def test_bf16_zero2_trains(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy=_strategy(stage=2), precision="bf16-mixed")
    out = fabric.launch(_bf16_checks, str(tmp_path))
    losses = out["losses"]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5, losses
    assert out["param_dtypes"] == ["torch.bfloat16"]
    assert out["master_dtypes"] == ["torch.float32"]  # the optimizer updates fp32 master weights
    assert out["output_dtype"] == "torch.float32"
    assert out["group_after_teardown"] is False
    consolidated = consolidate_deepspeed_checkpoint(tmp_path / "bf16")
    assert all(t.dtype == torch.float32 for t in consolidated.values())
    # fp32 master weights round to the bf16 weights the model computes with.
    assert _max_diff({k: v.bfloat16() for k, v in consolidated.items()}, out["state"]) == 0.0


# -- in-process checks: configuration, precision, registry, missing package ------------------------------------
def test_config_from_arguments_dict_and_file(tmp_path: Path) -> None:
    built = ds_config.build_config(stage=3, offload_optimizer=True, offload_parameters=True)
    assert built["zero_optimization"]["stage"] == 3
    assert built["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert built["zero_optimization"]["offload_param"]["device"] == "cpu"
    with pytest.raises(MisconfigurationError, match="stage 3"):
        ds_config.build_config(stage=2, offload_parameters=True)
    with pytest.raises(MisconfigurationError, match="0, 1, 2 and 3"):
        ds_config.build_config(stage=4)

    config = {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 3}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    from_file = DeepSpeedStrategy(config=path, gradient_clipping=0.5, gradient_accumulation_steps=4)
    assert from_file.zero_stage == 1
    from_dict = DeepSpeedStrategy(config=config, stage=3)
    assert from_dict.zero_stage == 1  # the config wins over the arguments
    config["zero_optimization"]["stage"] = 2
    assert from_dict.zero_stage == 1  # the strategy keeps its own copy

    fabric = Fabric(accelerator="cpu", devices=2, strategy=from_file, precision="bf16-mixed")
    engine_config = fabric.strategy.engine_config()
    assert engine_config["bf16"] == {"enabled": True}
    assert "fp16" not in engine_config
    assert engine_config["gradient_clipping"] == 0.5
    assert engine_config["gradient_accumulation_steps"] == 4
    assert engine_config["train_micro_batch_size_per_gpu"] == 3

    default = Fabric(accelerator="cpu", devices=2, strategy=_strategy(stage=2)).strategy
    default.process_dataloader(DataLoader(TensorDataset(torch.zeros(10, 1)), batch_size=5))
    assert default.engine_config()["train_micro_batch_size_per_gpu"] == 5
    assert default.engine_config()["zero_optimization"]["stage"] == 2
    assert default.engine_config()["gradient_clipping"] == 0.0  # DeepSpeed alone would clip at 1.0

    fp16 = {}
    ds_config.apply_precision(fp16, "16-mixed", {"loss_scale": 0, "initial_scale_power": 12})
    assert fp16["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 12}
    with pytest.raises(MisconfigurationError, match="precision='bf16-mixed'"):
        ds_config.apply_precision({"bf16": {"enabled": True}}, "32-true", {})
    with pytest.raises(MisconfigurationError, match="contradicts"):
        ds_config.apply_training_settings(
            {"gradient_clipping": 1.0}, micro_batch_size=None, gradient_accumulation_steps=None, gradient_clipping=2.0
        )
    with pytest.raises(MisconfigurationError, match="no such file"):
        DeepSpeedStrategy(config=tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(MisconfigurationError, match="JSON object"):
        DeepSpeedStrategy(config=tmp_path / "bad.json")
    zero3 = Fabric(accelerator="cpu", devices=2, strategy=_strategy(stage=3))
    with pytest.raises(FabricxError, match="fabric.launch"):
        zero3.init_module(empty_init=True)


def test_precision_choices() -> None:
    for name in ("32-true", "bf16-mixed", "bf16-true"):
        fabric = Fabric(accelerator="cpu", devices=2, strategy=_strategy(), precision=name)
        assert isinstance(fabric.precision, DeepSpeedPrecision) and fabric.precision.precision == name
    for name in ("64-true", "16-true"):
        with pytest.raises(MisconfigurationError, match="'bf16-mixed', 'bf16-true'"):
            Fabric(accelerator="cpu", devices=2, strategy=_strategy(), precision=name)
    with pytest.raises(MisconfigurationError, match="DeepSpeedPrecision"):
        Fabric(accelerator="cpu", devices=2, strategy=_strategy(), plugins=MixedPrecision("bf16-mixed", device="cpu"))

    bf16 = DeepSpeedPrecision("bf16-mixed")
    converted = bf16.convert_input((torch.ones(2), torch.ones(2, dtype=torch.long)))
    assert converted[0].dtype == torch.bfloat16 and converted[1].dtype == torch.long
    assert bf16.convert_output(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    assert bf16.convert_module(nn.Linear(2, 2)).weight.dtype == torch.float32  # the engine casts it
    true_bf16 = DeepSpeedPrecision("bf16-true")
    with true_bf16.module_init_context():
        assert nn.Linear(2, 2).weight.dtype == torch.bfloat16
    assert not DeepSpeedPrecision("32-true").needs_forward_context


def test_registry_names_do_not_import_deepspeed() -> None:
    code = (
        "import sys, json\n"
        "import fabricx\n"
        "from fabricx import Fabric\n"
        "from fabricx.strategies.registry import create_strategy\n"
        "names = ['deepspeed', 'deepspeed_stage_1', 'deepspeed_stage_2', 'deepspeed_stage_3',\n"
        "         'deepspeed_stage_2_offload', 'deepspeed_stage_3_offload']\n"
        "zero = {n: create_strategy(n).config['zero_optimization'] for n in names}\n"
        "Fabric(accelerator='cpu', devices=2, strategy='deepspeed_stage_3')\n"
        "print(json.dumps({'imported': 'deepspeed' in sys.modules, 'zero': zero}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["imported"] is False
    zero = report["zero"]
    assert [zero[n]["stage"] for n in ("deepspeed", "deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3")] == [
        2, 1, 2, 3
    ]
    assert zero["deepspeed_stage_2_offload"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero["deepspeed_stage_2_offload"]
    assert zero["deepspeed_stage_3_offload"]["stage"] == 3
    assert zero["deepspeed_stage_3_offload"]["offload_param"]["device"] == "cpu"


def test_missing_deepspeed_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    # The package is installed here; pretend it is not, as on a machine without the extra.
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real_find_spec(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'fabricx\[deepspeed\]'"):
        DeepSpeedStrategy()
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'fabricx\[deepspeed\]'"):
        Fabric(accelerator="cpu", devices=2, strategy="deepspeed_stage_2")


# -- offloading needs DeepSpeed's CPU Adam op, compiled on first use ----------------------------------------------
def _offload_checks(fabric: Fabric) -> dict:
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.set_num_threads(1)
    model = _net()
    optimizer = DeepSpeedCPUAdam(model.parameters(), lr=LR, weight_decay=0.01, adamw_mode=True)
    model, optimizer = fabric.setup(model, optimizer)
    for index in range(STEPS):
        x, y = _batch(index, fabric.global_rank)
        fabric.backward(mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    return {"vs_ddp": _max_diff(_full_state(fabric, model), _ddp_reference(fabric.global_rank, STEPS)["state"])}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first run compiles DeepSpeed's CPU Adam (minutes on a busy machine)
@pytest.mark.parametrize("name", ["deepspeed_stage_2_offload", "deepspeed_stage_3_offload"])
def test_offload_variants_train(name: str) -> None:
    strategy = create_strategy(name, start_method="spawn", timeout=1500)
    out = Fabric(accelerator="cpu", devices=2, strategy=strategy).launch(_offload_checks)
    assert out["vs_ddp"] < 1e-4, out


def test_an_untested_deepspeed_release_is_named_with_the_upgrade_command() -> None:
    from fabricx.strategies.deepspeed.strategy import _warn_if_untested_version

    expected = r"DeepSpeed 0\.19\.7 is older than 0\.19\.8.*pip install 'deepspeed>=0\.19\.8'"
    with pytest.warns(UserWarning, match=expected):
        _warn_if_untested_version("0.19.7")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_untested_version("0.19.8")
        _warn_if_untested_version("0.20.0+cpu")
