"""A small GAN with manual optimization: two optimizers stepped by the module itself.

LightningModule code for Lightning's manual optimization runs as it is on ``fabricx.train``:
``self.automatic_optimization = False``, ``self.optimizers()``, ``self.manual_backward``,
``toggle_optimizer``, ``clip_gradients`` and schedulers stepped by hand. The generator learns to
turn noise into points of a 2-D ring.

    python examples/gan_manual.py --max-epochs 30
    python examples/gan_manual.py --accelerator cpu --devices 2 --strategy ddp_find_unused_parameters_true

Under DDP each backward reaches only one optimizer's parameters (``toggle_optimizer``), so DDP must be told
to look for unused parameters: ``ddp_spawn`` or ``ddp`` is refused at the first step, as in Lightning.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from fabricx.train import Trainer, TrainModule


class RingGAN(TrainModule):
    """Generator and discriminator as two sub-networks, each with its own optimizer."""

    def __init__(self, noise_dim: int = 4, lr: float = 2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(noise_dim, 32), nn.ReLU(), nn.Linear(32, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.generator(noise)

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        noise = torch.randn(real.shape[0], self.hparams.noise_dim, device=real.device)
        real_label = torch.ones(real.shape[0], 1, device=real.device)
        fake_label = torch.zeros(real.shape[0], 1, device=real.device)

        # discriminator: real points up, generated points down
        self.toggle_optimizer(opt_d)
        fake = self(noise).detach()
        d_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), real_label)
        d_loss = d_loss + F.binary_cross_entropy_with_logits(self.discriminator(fake), fake_label)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        opt_d.step()
        self.untoggle_optimizer(opt_d)

        # generator: make the discriminator call generated points real
        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(noise)), real_label)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True, on_step=True, on_epoch=True)

    def on_train_epoch_end(self):
        for scheduler in self.lr_schedulers():
            scheduler.step()

    def configure_optimizers(self):
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        decay = [torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.97) for opt in (opt_g, opt_d)]
        return [opt_g, opt_d], decay


def ring(samples: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    angle = torch.rand(samples, generator=generator) * 2 * math.pi
    radius = 1.0 + 0.05 * torch.randn(samples, generator=generator)
    return TensorDataset(torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--devices", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--root-dir", default="gan_runs")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    devices = int(args.devices) if args.devices.isdigit() else args.devices

    trainer = Trainer(
        accelerator=args.accelerator,
        devices=devices,
        strategy=args.strategy,
        max_epochs=args.max_epochs,
        default_root_dir=args.root_dir,
        enable_progress_bar=not args.no_progress,
        enable_model_summary=False,
        seed=0,
    )
    model = RingGAN()
    trainer.fit(model, DataLoader(ring(args.samples), batch_size=args.batch_size, shuffle=True))
    with torch.no_grad():
        points = model(torch.randn(1000, model.hparams.noise_dim))
    radius = points.norm(dim=1)
    metrics = trainer.callback_metrics
    trainer.print(
        f"Finished at step {trainer.global_step} in epoch {trainer.current_epoch - 1}/{args.max_epochs - 1} "
        "(2 optimizer steps per batch)\n"
        f"g_loss={float(metrics['g_loss_epoch']):.3f} d_loss={float(metrics['d_loss_epoch']):.3f}\n"
        f"Generated points: mean radius {radius.mean():.3f} (target 1.0), std {radius.std():.3f}"
    )


if __name__ == "__main__":
    main()
