"""The Accelerate tutorial's final training loop, run through fabricx's Accelerate adapter.

Only the import differs from a script written for Hugging Face Accelerate. On synthetic data, on CPU,
in well under a minute:

    python examples/accelerate_tutorial.py --project-dir runs/tutorial
    python examples/accelerate_tutorial.py --project-dir runs/tutorial --stop-after 5   # "crash" at step 5
    python examples/accelerate_tutorial.py --project-dir runs/tutorial --resume         # continue exactly
    fabricx run --devices 2 examples/accelerate_tutorial.py --project-dir runs/tutorial2

It uses gradient accumulation, gradient clipping, mixed precision, ``save_state``/``load_state`` with
automatic checkpoint names and a retention limit, an object registered for checkpointing, a stateful
data loader that resumes mid-epoch, experiment tracking, and exports the weights with ``save_model``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx.checkpoint import load_weights
from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, ProjectConfiguration, set_seed


class TrainingProgress:
    """Where training is (epoch, optimizer steps); registered so that ``save_state`` stores it."""

    def __init__(self) -> None:
        self.epoch = 0
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])


def build_data(samples: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(1234)
    inputs = torch.randn(samples, 16, generator=generator)
    targets = inputs[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(inputs, targets)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixed-precision", default="bf16", choices=["no", "fp16", "bf16"])
    parser.add_argument("--gradient-accumulation-steps", type=int, default=2)
    parser.add_argument("--project-dir", default="runs/accelerate_tutorial")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=70)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--save-every", type=int, default=3, help="optimizer steps between checkpoints")
    parser.add_argument("--total-limit", type=int, default=2, help="checkpoints to keep")
    parser.add_argument("--stop-after", type=int, default=0, help="stop after this many optimizer steps (0: never)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_seed(42)

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.8)
    training_dataloader = DataLoader(build_data(args.samples), batch_size=args.batch_size, shuffle=True)
    loss_function = nn.MSELoss()

    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with="csv",
        project_config=ProjectConfiguration(
            project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=args.total_limit
        ),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    device = accelerator.device
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)
    accelerator.init_trackers("accelerate_tutorial", config=vars(args))
    last_saved = None  # the step of the newest checkpoint, to say where --resume will continue
    if args.resume:
        accelerator.load_state()
        last_saved = progress.step
        accelerator.print(f"resumed at epoch {progress.epoch}, step {progress.step} on {device}")

    for epoch in range(progress.epoch, args.epochs):
        model.train()
        for inputs, targets in training_dataloader:
            with accelerator.accumulate(model):
                outputs = model(inputs)
                with accelerator.autocast():
                    loss = loss_function(outputs, targets)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                progress.step += 1
                accelerator.log({"train_loss": loss.item()}, step=progress.step)
                if progress.step % args.save_every == 0:
                    accelerator.save_state()
                    last_saved = progress.step
                if progress.step == args.stop_after:
                    saved = "no checkpoint yet" if last_saved is None else f"last checkpoint at step {last_saved}"
                    accelerator.print(f"stopping early after step {progress.step} ({saved}; --resume continues there)")
                    accelerator.end_training()
                    return
        progress.epoch = epoch + 1

    accelerator.wait_for_everyone()
    save_directory = os.path.join(args.project_dir, "model")
    accelerator.save_model(model, save_directory)
    unwrapped_model = accelerator.unwrap_model(model)
    unwrapped_model.load_state_dict(load_weights(save_directory))
    accelerator.print(f"finished: {progress.step} optimizer steps, last loss {loss.item():.6f}")
    accelerator.print(f"weights in {save_directory}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
