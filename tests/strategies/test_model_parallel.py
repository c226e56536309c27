"""ModelParallelStrategy on CPU/gloo: one launch of 4 ranks runs TP x FSDP2 on a 2x2 mesh (with a sharded
checkpoint round trip) and tensor parallelism of size 2 alone, each against the unsharded model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fabricx import Fabric
from fabricx.strategies.model_parallel import ModelParallelStrategy
from fabricx.utilities.exceptions import MisconfigurationError

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(600)]

TOL = 1e-5
D, H, BATCH = 8, 16, 8


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(D)  # stays a plain, replicated parameter under TP
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.norm(x))))


def _mlp() -> MLP:
    torch.manual_seed(0)
    return MLP()


def tensor_parallel(model: nn.Module, mesh: Any) -> nn.Module:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    return parallelize_module(model, mesh["tensor_parallel"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def tensor_and_data_parallel(model: nn.Module, mesh: Any) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    tensor_parallel(model, mesh)
    fully_shard(model, mesh=mesh["data_parallel"])
    return model


def _batch(step: int, replicas: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(BATCH, D, generator=g), torch.randn(BATCH, D, generator=g)
    lo, hi = rank * BATCH // replicas, (rank + 1) * BATCH // replicas
    return x[lo:hi], y[lo:hi]


def _train(fabric: Fabric, steps: int, whole_batch: bool = False) -> tuple[Any, Any, list[float], Any]:
    model = _mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer = fabric.setup(model, optimizer)
    sampler = fabric.strategy.distributed_sampler_kwargs or {"num_replicas": 1, "rank": 0}
    if whole_batch:
        sampler = {"num_replicas": 1, "rank": 0}
    norms, first_output = [], None
    for step in range(steps):
        x, y = _batch(step, sampler["num_replicas"], sampler["rank"])
        output = model(x)
        if first_output is None:
            first_output = output.detach().clone()
        fabric.backward(F.mse_loss(output, y))
        norms.append(float(fabric.clip_gradients(model, optimizer, max_norm=0.1)))
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer, norms, first_output


def _full(fabric: Fabric, model: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in fabric.strategy.get_module_state_dict(fabric.unwrap(model)).items()}


def _main(fabric: Fabric, tmp: str) -> dict[str, Any]:
    """Four ranks: TP x FSDP on the 2x2 mesh, its sharded checkpoint, then TP alone (size 2)."""
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    model, optimizer, norms, _ = _train(fabric, steps=1)
    sampler = fabric.strategy.distributed_sampler_kwargs
    out["mesh"] = {
        "weights": _full(fabric, model),
        "norms": norms,
        "samplers": fabric.all_gather(torch.tensor([sampler["num_replicas"], sampler["rank"]])).tolist(),
        "placements": [getattr(p, "dim", None) for p in fabric.unwrap(model).fc1.weight.placements],
        "names": fabric.strategy.device_mesh.mesh_dim_names,
    }

    # Sharded checkpoint round trip into a freshly parallelized model and optimizer.
    fabric.save(Path(tmp, "mesh"), {"model": model, "optimizer": optimizer})
    fresh = _mlp()
    fresh, fresh_optimizer = fabric.setup(fresh, torch.optim.AdamW(fresh.parameters(), lr=0.05))
    fabric.load(Path(tmp, "mesh"), {"model": fresh, "optimizer": fresh_optimizer})
    out["checkpoint"] = (
        (out["mesh"]["weights"], fabric.strategy.get_optimizer_state(fabric.unwrap(optimizer))),
        (_full(fabric, fresh), fabric.strategy.get_optimizer_state(fabric.unwrap(fresh_optimizer))),
    )

    # Tensor parallelism alone (size 2); both data-parallel groups see the whole batch and so must agree.
    tp = Fabric(accelerator="cpu", devices=4, strategy=ModelParallelStrategy(tensor_parallel, 2, 2))
    model, _, norms, first = _train(tp, steps=3, whole_batch=True)
    inner = tp.unwrap(model)
    out["tp"] = {
        "weights": _full(tp, model),
        "norms": norms,
        "first_output": tp.all_gather(first),
        "fc1_local": tuple(inner.fc1.weight.to_local().shape),
        "fc2_local": tuple(inner.fc2.weight.to_local().shape),
    }
    return out


def _reference(steps: int) -> tuple[dict[str, torch.Tensor], list[float], torch.Tensor]:
    fabric = Fabric(accelerator="cpu", devices=1)
    model, _, norms, first = _train(fabric, steps)
    return {k: v.clone() for k, v in fabric.unwrap(model).state_dict().items()}, norms, first


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b), (sorted(a), sorted(b))
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    strategy = ModelParallelStrategy(
        tensor_and_data_parallel, data_parallel_size=2, tensor_parallel_size=2, start_method="spawn", timeout=90
    )
    tmp = str(tmp_path_factory.mktemp("model_parallel"))
    return Fabric(accelerator="cpu", devices=4, strategy=strategy).launch(_main, tmp)


def test_tensor_parallel_matches_unsharded_model(runs: dict[str, Any]) -> None:
    out = runs["tp"]
    weights, norms, first = _reference(steps=3)
    assert out["fc1_local"] == (H // 2, D) and out["fc2_local"] == (D, H // 2)  # column / row split
    for output in out["first_output"]:  # every rank's output of the first step
        assert torch.allclose(output, first, atol=TOL)
    assert out["norms"] == pytest.approx(norms, abs=TOL)
    assert min(norms) > 0.1  # clipping was active
    assert _max_diff(weights, out["weights"]) < TOL


def test_two_by_two_mesh_trains_one_step_correctly(runs: dict[str, Any]) -> None:
    out = runs["mesh"]
    weights, norms, _ = _reference(steps=1)
    assert out["names"] == ("data_parallel", "tensor_parallel")
    # ranks 0,1 form data-parallel group 0 and see the same half of the batch; ranks 2,3 the other half
    assert out["samplers"] == [[2, 0], [2, 0], [2, 1], [2, 1]]
    assert out["placements"] == [0, 0]  # sharded on both mesh dimensions (a Replicate has no dim)
    assert out["norms"] == pytest.approx(norms, abs=TOL)
    assert _max_diff(weights, out["weights"]) < TOL


def test_sharded_checkpoint_round_trip_on_2d_mesh(runs: dict[str, Any]) -> None:
    (weights, optimizer), (reloaded, reloaded_optimizer) = runs["checkpoint"]
    assert _max_diff(weights, reloaded) == 0.0
    assert optimizer["param_groups"] == reloaded_optimizer["param_groups"]
    assert set(optimizer["state"]) == set(reloaded_optimizer["state"]) == set(range(6))
    for index, values in optimizer["state"].items():
        for key, value in values.items():
            assert torch.equal(value, reloaded_optimizer["state"][index][key]), (index, key)


def test_layout_is_validated_before_launch() -> None:
    with pytest.raises(MisconfigurationError, match="data_parallel_size=3 x tensor_parallel_size=1"):
        Fabric(accelerator="cpu", devices=2, strategy=ModelParallelStrategy(tensor_parallel, 3, 1))
    with pytest.raises(MisconfigurationError, match="tensor_parallel_size=0"):
        ModelParallelStrategy(tensor_parallel, 1, 0)
    with pytest.raises(TypeError, match="parallelize_fn"):
        ModelParallelStrategy("tensor_parallel")  # type: ignore[arg-type]
    strategy = ModelParallelStrategy(tensor_parallel, tensor_parallel_size=2)
    Fabric(accelerator="cpu", devices=4, strategy=strategy)
    assert strategy.mesh_shape == (2, 2)
