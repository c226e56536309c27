"""torch.compile through Fabric (CPU, inductor): the compiled forward is kept under the strategy, the
numbers match eager, checkpoint keys are the user's own, and a steady loop never recompiles."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

from fabricx import Fabric
from fabricx.compile import check_compile_option, compile_repeated_blocks


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


def _train(fabric: Fabric, make_model, steps: int = 6) -> dict:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    generator = torch.Generator().manual_seed(fabric.global_rank)
    losses = []
    try:
        for step in range(steps):
            # From step 3 on any recompilation raises: a steady loop compiles once.
            torch._dynamo.config.error_on_recompile = step >= 3
            x, y = torch.randn(8, 16, generator=generator), torch.randn(8, 1, generator=generator)
            loss = nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    finally:
        torch._dynamo.config.error_on_recompile = False
    return {
        "losses": losses,
        "keys": list(model.state_dict()),
        "forward": type(model._forward_module).__name__,
        "inner": type(getattr(model._forward_module, "_orig_mod", None)).__name__,
    }


def _eager_and_compiled(fabric: Fabric) -> list[dict]:
    return [_train(fabric, _model), _train(fabric, lambda: torch.compile(_model()))]


def test_compiled_model_single_device_matches_eager_with_clean_keys():
    fabric = Fabric(accelerator="cpu", devices=1)
    eager, user_compiled = _eager_and_compiled(fabric)
    by_flag = _train(Fabric(accelerator="cpu", devices=1, compile=True), _model)
    for compiled in (user_compiled, by_flag):
        assert compiled["forward"] == "OptimizedModule"
        assert compiled["keys"] == eager["keys"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert compiled["losses"] == pytest.approx(eager["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.distributed
def test_compiled_model_under_ddp_is_compiled_over_the_ddp_wrapper():
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    eager, compiled = fabric.launch(_eager_and_compiled)
    assert compiled["forward"] == "OptimizedModule" and compiled["inner"] == "DistributedDataParallel"
    assert compiled["keys"] == eager["keys"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert compiled["losses"] == pytest.approx(eager["losses"], rel=1e-5, abs=1e-6)


class _Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        return x


def test_regional_compile_compiles_each_block_in_place_and_keeps_keys():
    model = _Blocks()
    keys = list(model.state_dict())
    assert compile_repeated_blocks(model, backend="eager") == 3
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    assert model.embed._compiled_call_impl is None
    assert list(model.state_dict()) == keys
    with pytest.raises(ValueError, match="compile=True"):
        compile_repeated_blocks(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="'regional'"):
        check_compile_option("everything")


def test_dynamo_shim_sees_torchs_compiled_module():
    """Fails loudly if torch renames the private pieces of OptimizedModule the shim relies on."""
    from fabricx._compat.dynamo import compile_like, compiled_parts

    layer = nn.Linear(2, 2)
    compiled = torch.compile(layer, backend="eager")
    original, context = compiled_parts(compiled)
    assert original is layer and context is compiled.dynamo_ctx
    assert compiled_parts(layer) is None
    again = compile_like(nn.Linear(2, 2), context)
    assert type(again) is type(compiled) and again.dynamo_ctx is context


def test_accelerate_dynamo_settings_become_fabric_compile_options():
    from accelerate.utils import DynamoBackend
    from accelerate.utils import TorchDynamoPlugin as AccelerateDynamoPlugin

    from fabricx.compat.accelerate import Accelerator, TorchDynamoPlugin
    from fabricx.compat.accelerate.dynamo import compile_option

    assert compile_option() is None and compile_option("no") is None
    assert compile_option(DynamoBackend.INDUCTOR) == {"backend": "inductor"}
    assert compile_option(dynamo_plugin=TorchDynamoPlugin(mode="max-autotune", use_regional_compilation=True)) == {
        "regional": True, "backend": "inductor", "mode": "max-autotune"
    }
    peer = AccelerateDynamoPlugin(backend=DynamoBackend.EAGER, fullgraph=True)
    assert compile_option(dynamo_plugin=peer) == {"backend": "eager", "fullgraph": True}
    accelerator = Accelerator(cpu=True, dynamo_backend="eager")
    model = accelerator.prepare(_model())
    assert type(model._forward_module).__name__ == "OptimizedModule"
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_trainer_compile_flag_compiles_the_module(tmp_path):
    from fabricx.train import Trainer
    from tests.train._train_helpers import Regressor, loader, regression_data

    trainer = Trainer(
        accelerator="cpu", max_epochs=1, compile={"backend": "eager"}, default_root_dir=tmp_path,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    )
    module = Regressor()
    keys = list(module.state_dict())
    trainer.fit(module, loader(regression_data(32), batch_size=8))
    assert type(trainer.model._forward_module).__name__ == "OptimizedModule"
    assert list(module.state_dict()) == keys
