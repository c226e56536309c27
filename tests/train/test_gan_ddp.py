"""examples/gan_manual.py's module (manual optimization, two optimizers) on 2 DDP processes, and Lightning's Trainer.

One launch of two gloo processes runs, in each rank: the example's `RingGAN` through fabricx's Trainer with
`ddp_find_unused_parameters_true`, then the same module as a LightningModule through Lightning's Trainer with
the same strategy and seed (both train; their weights are not compared bit for bit, see below), then both
Trainers with `find_unused_parameters=False` (fabricx's `ddp_spawn`, Lightning's `ddp`), which Lightning
refuses at the first step's second backward with a RuntimeError that names `ddp_find_unused_parameters_true`.
The processes are started here with the launch variables set, so both Trainers join them in place instead of
starting their own (as under torchrun).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.distributed

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gan_manual.py"
#: (side, strategy). Lightning's ddp_spawn starts processes of its own even inside a launch; its `ddp` has the same
#: DDP settings (find_unused_parameters=False) and is refused with the same message.
RUNS = (
    ("fabricx", "ddp_find_unused_parameters_true"),
    ("lightning", "ddp_find_unused_parameters_true"),
    ("fabricx", "ddp_spawn"),
    ("lightning", "ddp"),
)
MAX_STEPS = 8  # optimizer steps: 4 batches of 32 per rank, each stepping the discriminator and the generator


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("gan_manual_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lightning_ring_gan(example: Any) -> type:
    from lightning.pytorch import LightningModule
    from torch import nn

    fabricx_class = example.RingGAN

    class RingGAN(LightningModule):
        # The example's __init__ (super() in it is bound to the TrainModule class); every other method is the example's.
        def __init__(self, noise_dim: int = 4, lr: float = 2e-3):
            super().__init__()
            self.save_hyperparameters()
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(noise_dim, 32), nn.ReLU(), nn.Linear(32, 2))
            self.discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

        forward = fabricx_class.forward
        training_step = fabricx_class.training_step
        on_train_epoch_end = fabricx_class.on_train_epoch_end
        configure_optimizers = fabricx_class.configure_optimizers

    return RingGAN


def _fit(side: str, strategy: str, root: Path) -> dict[str, Any]:
    """Train one side from seed 0; the weights it ended with, or the error it raised."""
    example = _example()
    if side == "fabricx":
        from fabricx import seed_everything
        from fabricx.train import Trainer

        module_class = example.RingGAN
    else:
        from lightning.pytorch import Trainer, seed_everything

        module_class = _lightning_ring_gan(example)
    seed_everything(0)
    module = module_class()
    initial = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_steps=MAX_STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root / side / strategy),
    )
    loader = torch.utils.data.DataLoader(example.ring(256), batch_size=32, shuffle=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(module, loader)
    except RuntimeError as error:
        return {"error": str(error), "initial": initial}
    metrics = {name: float(value) for name, value in trainer.callback_metrics.items()}
    return {"initial": initial, "final": module.state_dict(), "global_step": trainer.global_step, "metrics": metrics}


def _rank(local_rank: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", NODE_RANK="0", LOCAL_RANK=str(local_rank)
    )
    torch.set_num_threads(1)
    root = Path(out)
    results = {run: _fit(*run, root) for run in RUNS}
    torch.save(results, root / f"rank{local_rank}.pt")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[tuple[str, str], dict[str, Any]]]:
    from torch.multiprocessing import start_processes

    from fabricx.environments.local import find_free_port

    pytest.importorskip("lightning.pytorch")
    out = tmp_path_factory.mktemp("gan_ddp")
    start_processes(_rank, args=(find_free_port(), str(out)), nprocs=2, start_method="spawn")
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def test_gan_trains_with_find_unused_parameters_as_lightning_does(results):
    for per_rank in results:
        fabricx = per_rank["fabricx", "ddp_find_unused_parameters_true"]
        lightning = per_rank["lightning", "ddp_find_unused_parameters_true"]
        assert "error" not in fabricx, fabricx.get("error")
        assert "error" not in lightning, lightning.get("error")
        assert fabricx["global_step"] == lightning["global_step"] == MAX_STEPS
        for name, start in fabricx["initial"].items():
            assert torch.equal(start, lightning["initial"][name]), f"{name} starts differently"
            assert not torch.equal(start, fabricx["final"][name]), f"{name} was not trained"
            assert not torch.equal(start, lightning["final"][name]), f"{name} was not trained by Lightning"
        # Not compared bit for bit with Lightning: with the same batches and the same random draws, the first
        # discriminator loss already differs in the 4th digit (1.34454 vs 1.34497); the cause is not found yet.
        assert set(fabricx["metrics"]) >= {"g_loss_step", "d_loss_step"}
    # Gradients were averaged across the ranks (each saw other batches): both ranks hold the same weights.
    for side in ("fabricx", "lightning"):
        for name, tensor in results[0][side, "ddp_find_unused_parameters_true"]["final"].items():
            assert torch.equal(tensor, results[1][side, "ddp_find_unused_parameters_true"]["final"][name]), name


def test_ddp_spawn_is_refused_as_lightning_refuses_it_naming_the_strategy_to_use(results):
    for per_rank in results:
        lightning = per_rank["lightning", "ddp"]
        fabricx = per_rank["fabricx", "ddp_spawn"]
        assert "ddp_find_unused_parameters_true" in lightning.get("error", ""), "Lightning no longer refuses it"
        message = fabricx.get("error", "")
        assert "ddp_find_unused_parameters_true" in message, message
        assert "DDPStrategy(start_method='spawn', find_unused_parameters=True)" in message, message
        assert "manual_backward" in message and "toggle_optimizer" in message, message
