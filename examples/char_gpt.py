"""A small GPT that learns to write Python, trained on the standard library's own source files.

No download: the text is whatever ``.py`` files this Python installation ships. A plain fabricx loop
that runs unchanged on one CPU, several processes (DDP), sharded (FSDP) or under DeepSpeed, in any
precision; it saves checkpoints as it goes and ``--resume`` continues mid-epoch at the next unseen
batch, giving the same model as a run that never stopped. At the end it writes a sample.

Run::

    python examples/char_gpt.py                                         # 1 process (bf16-mixed on a GPU)
    python examples/char_gpt.py --devices 2 --strategy ddp              # 2 processes
    python examples/char_gpt.py --devices 2 --strategy fsdp
    python examples/char_gpt.py --devices 2 --strategy deepspeed_stage_2
    python examples/char_gpt.py --max-steps 120 --save-every 60         # stop early ...
    python examples/char_gpt.py --max-steps 200 --resume                # ... and continue from step 120
"""

from __future__ import annotations

import argparse
import math
import os
import sysconfig
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

# --------------------------------------------------------------------------------------------------
# Data: bytes of the standard library's source, cut into fixed windows
# --------------------------------------------------------------------------------------------------


def stdlib_text(max_bytes: int) -> bytes:
    """The first ``max_bytes`` of the standard library's ``.py`` files, in a fixed (sorted) order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    if total == 0:
        raise SystemExit(f"No .py files found under {root}; pass a text file with --text.")
    return b"".join(chunks)[:max_bytes]


class ByteWindows(Dataset):
    """Non-overlapping windows of ``block_size + 1`` bytes: input is the first ``block_size``, target
    the same shifted by one. Bytes are the vocabulary (256 symbols), so any text works."""

    def __init__(self, data: bytes, block_size: int) -> None:
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        self.block_size = block_size

    def __len__(self) -> int:
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        start = index * self.block_size
        window = self.tokens[start : start + self.block_size + 1]
        return window[:-1], window[1:]


# --------------------------------------------------------------------------------------------------
# Model: a minimal decoder-only transformer
# --------------------------------------------------------------------------------------------------


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.norm1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.norm2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, block_size: int, n_layer: int, n_head: int, n_embd: int, vocab_size: int = 256) -> None:
        super().__init__()
        self.block_size = block_size
        self.token_embedding = nn.Embedding(vocab_size, n_embd)
        self.position_embedding = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.norm = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


@torch.no_grad()
def sample(model: nn.Module, prompt: bytes, length: int, device: torch.device, seed: int = 0) -> str:
    """Continue ``prompt`` by ``length`` bytes, sampling at temperature 0.8 from the top 20 bytes.

    Every rank runs this with the same seed: sharded models (FSDP, ZeRO-3) need all ranks in forward.
    """
    generator = torch.Generator().manual_seed(seed)
    block_size = model.block_size
    idx = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    for _ in range(length):
        logits = model(idx[:, -block_size:])[:, -1, :].float().cpu() / 0.8
        top = torch.topk(logits, 20)
        choice = torch.multinomial(F.softmax(top.values, dim=-1), 1, generator=generator)
        idx = torch.cat([idx, top.indices.gather(1, choice).to(device)], dim=1)
    return bytes(idx[0].tolist()).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------------------
# Training: a plain Fabric loop with checkpoints and exact resumption
# --------------------------------------------------------------------------------------------------


def train(args: argparse.Namespace) -> None:
    from fabricx import Fabric
    from fabricx.checkpoint import CheckpointManager
    from fabricx.loggers import CSVLogger

    root = Path(args.root_dir)
    logger = CSVLogger(str(root), name="logs", version=0)
    fabric = Fabric(
        accelerator=args.accelerator,
        strategy=build_strategy(args.strategy),
        devices=args.devices,
        num_nodes=args.num_nodes,
        precision=args.precision,
        loggers=logger,
    )
    fabric.launch()
    fabric.seed_everything(args.seed)

    with fabric.rank_zero_first():
        dataset = ByteWindows(stdlib_text(args.text_bytes), args.block_size)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    loader = fabric.setup_dataloaders(loader)

    with fabric.init_module():
        model = GPT(args.block_size, args.n_layer, args.n_head, args.n_embd)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    fabric.print(
        f"GPT with {sum(p.numel() for p in fabric.unwrap(model).parameters()) / 1e6:.2f}M parameters, "
        f"{len(dataset)} windows of {args.block_size} bytes, {len(loader)} batches per epoch per rank, "
        f"{fabric.world_size} process(es), strategy {type(fabric.strategy).__name__}, "
        f"precision {args.precision or os.environ.get('FABRICX_PRECISION', '32-true')}"
    )

    # Everything that must continue where it stopped: weights, optimizer, data position, step count.
    # Random generator states of every rank are saved with it automatically.
    state = {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}
    manager = CheckpointManager(root, total_limit=2)
    if args.resume:
        latest = fabric.load_latest(manager, state)  # the newest complete checkpoint, the same on every rank
        if latest is None:
            fabric.print(f"--resume: no checkpoint under {manager.directory}; starting from scratch.")
        else:
            fabric.print(f"Resumed from {latest} at step {state['step']} (epoch {loader.epoch}).")

    # A DeepSpeed engine clips inside optimizer.step() (build_strategy set gradient_clipping=1.0).
    engine_clips = fabric.strategy.strategy_name == "deepspeed"
    step = state["step"]
    start = time.perf_counter()
    model.train()
    while step < args.max_steps:
        for x, y in loader:
            lr = cosine_lr(step, args)
            for group in optimizer.param_groups:
                group["lr"] = lr
            logits = model(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            fabric.backward(loss)
            if not engine_clips:
                fabric.clip_gradients(model, optimizer, max_norm=1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1

            if step % args.log_every == 0 or step == args.max_steps:
                loss_value = fabric.all_reduce(loss.detach(), reduce_op="mean").item()
                fabric.log_dict({"loss": loss_value, "lr": lr, "epoch": loader.epoch}, step=step)
                fabric.print(f"step {step:5d}  epoch {loader.epoch}  loss {loss_value:.3f}  lr {lr:.2e}")
            # Save every N steps and where the run stops, so that --resume continues from here.
            if args.save_every and (step % args.save_every == 0 or step >= args.max_steps):
                state["step"] = step
                # checkpoints/checkpoint_{n}; the oldest beyond total_limit go once the new one is complete.
                path = fabric.save_checkpoint(manager, state)
                fabric.print(f"saved {path}")
            if step >= args.max_steps:
                break

    elapsed = time.perf_counter() - start
    logger.finalize("success")
    # Equal for a resumed run and one that never stopped (same flags): try it. Sharded strategies
    # (FSDP, ZeRO-3) sum this rank's shard only.
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    fabric.print(f"trained to step {step} in {elapsed:.1f} s; weight checksum {checksum:.10e}")
    fabric.print(f"metrics: {logger.metrics_file_path}   checkpoints: {manager.directory}")

    model.eval()
    text = sample(model, b"def ", args.sample_bytes, fabric.device, seed=args.seed)
    fabric.print("---- sample ----\n" + text + "\n----------------")


def build_strategy(name: str) -> object:
    """FSDP and DeepSpeed with settings for this model; any other name goes to Fabric unchanged."""
    if name in ("fsdp", "fsdp_cpu_offload"):
        from fabricx.strategies import FSDPStrategy

        # Each transformer block becomes its own FSDP unit: gathered for its forward, freed after.
        return FSDPStrategy(auto_wrap_policy={Block}, cpu_offload=name == "fsdp_cpu_offload")
    if name.startswith("deepspeed"):
        from fabricx.strategies import DeepSpeedStrategy

        stage = int(name.split("_")[2]) if name.startswith("deepspeed_stage_") else 2
        offload = name.endswith("_offload")
        return DeepSpeedStrategy(
            stage=stage, offload_optimizer=offload, offload_parameters=offload and stage == 3, gradient_clipping=1.0
        )
    return name


def cosine_lr(step: int, args: argparse.Namespace) -> float:
    """Linear warm-up for 10% of ``--decay-steps``, then cosine decay to a tenth of the peak.

    The schedule does not depend on ``--max-steps``, so stopping early and resuming changes nothing.
    """
    warmup = max(1, args.decay_steps // 10)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, args.decay_steps - warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda, mps or auto")
    parser.add_argument("--strategy", default="auto", help="auto, ddp, fsdp, deepspeed_stage_2, ...")
    parser.add_argument("--devices", default="auto", help="count (CPU: processes), '0,1', -1 or auto")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument(
        "--precision", default="auto", help="bf16-mixed, 32-true, 16-mixed, ... (auto: bf16-mixed on a GPU)"
    )
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps (0: never)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--root-dir", default="runs/char_gpt", help="checkpoints and logs go here")
    parser.add_argument("--text-bytes", type=int, default=1_000_000, help="how much stdlib source to use")
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    # Sized for a CPU: 200 steps take about 85 s of CPU time on 2 cores (docs/examples.md).
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--decay-steps", type=int, default=200, help="length of the learning-rate schedule")
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--sample-bytes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.devices != "auto" and args.devices.lstrip("-").isdigit():
        args.devices = int(args.devices)
    if args.precision == "auto":
        # bf16-mixed where the hardware has it; CPUs without native bf16 run it several times slower
        # than fp32. None leaves the choice to Fabric (32-true) or to `fabricx run --precision`.
        on_gpu = args.accelerator in ("auto", "cuda", "gpu") and torch.cuda.is_available()
        args.precision = "bf16-mixed" if on_gpu and torch.cuda.is_bf16_supported() else None
    return args


if __name__ == "__main__":
    train(parse_args())
