"""Tokens per second and peak memory of a GPT-2-small training step (bf16-mixed, fused AdamW), eager and compiled,
through raw PyTorch, fabricx, Lightning Fabric and Accelerate, interleaved in one process.

Every candidate is built up front from the same seed and trains on the same batches. The candidates
take turns, ``steps`` optimizer steps each, for ``rounds`` rounds whose order rotates, so a GPU that
heats up or a machine that gets busier slows them alike; tokens/s is the median over rounds. Peak memory
of a candidate is the device's peak during its turn above what was allocated when it began, plus its
own resident state (parameters and optimizer state): the other candidates' resident state is left out.
Ratios are to raw PyTorch of the same kind (eager or compiled) in the same run: target tokens/s >= 0.98x
and peak memory <= 1.02x.

MFU is read from fabricx's ``ThroughputMonitor`` (fed after the timed rounds, so its per-step
synchronisation does not slow the fabricx candidate) and also computed here from the FLOPs of one step
(``measure_flops`` on the meta device) and the device's data-sheet peak; both are ``None`` where the peak
is unknown (the CPU).

Run: ``python -m benchmarks.gpu_throughput [--dry-run]`` (``--dry-run``: a tiny GPT on the CPU)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks.gpt import GPT, TINY, GPTConfig, fused_adamw, parameter_count, token_batches

CANDIDATES = ("raw", "fabricx", "lightning", "accelerate")


@dataclass
class Candidate:
    name: str
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    resident_bytes: int
    tokens_per_s: list[float] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)
    context: Any = None  # the Fabric of the fabricx candidate (for ThroughputMonitor)


def _resident_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    tensors = {id(t): t for t in model.parameters()}
    tensors.update({id(t): t for t in model.buffers()})
    for state in optimizer.state.values():
        tensors.update({id(v): v for v in state.values() if isinstance(v, torch.Tensor)})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _fresh(config: GPTConfig, compiled: bool, backend: str) -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = GPT(config)
    return model, (lambda m: torch.compile(m, backend=backend)) if compiled else (lambda m: m)


def build(name: str, config: GPTConfig, device: torch.device, compiled: bool, backend: str) -> Candidate:
    """One candidate's model, optimizer and step function, set up the way that library's users write it."""
    model, maybe_compile = _fresh(config, compiled, backend)
    if name == "raw":
        model = model.to(device)
        optimizer = fused_adamw(model)
        forward = maybe_compile(model)

        def raw_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = forward(x, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        return Candidate(name, raw_step, 0, context=(model, optimizer))
    if name in ("fabricx", "lightning"):
        if name == "fabricx":
            from fabricx import Fabric
        else:
            from lightning.fabric import Fabric  # type: ignore[no-redef]
        fabric = Fabric(accelerator=device.type, devices=1, precision="bf16-mixed")
        model = model.to(device)  # fused AdamW needs the parameters where they will train
        wrapped, optimizer = fabric.setup(maybe_compile(model), fused_adamw(model))

        def fabric_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = wrapped(x, y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return Candidate(name, fabric_step, 0, context=(model, optimizer, fabric))
    if name == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
        model = model.to(accelerator.device)
        wrapped, optimizer = accelerator.prepare(maybe_compile(model), fused_adamw(model))

        def accelerate_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = wrapped(x, y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return Candidate(name, accelerate_step, 0, context=(model, optimizer))
    raise ValueError(f"unknown candidate {name!r}; choose from {CANDIDATES}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory(device: torch.device) -> tuple[Callable[[], None], Callable[[], int], Callable[[], int]]:
    if device.type == "cuda":
        return (lambda: torch.cuda.reset_peak_memory_stats(device)), (
            lambda: torch.cuda.memory_allocated(device)
        ), (lambda: torch.cuda.max_memory_allocated(device))
    return (lambda: None), (lambda: 0), (lambda: 0)


def run_group(
    names: list[str], config: GPTConfig, device: torch.device, compiled: bool, backend: str,
    batches: list, steps: int, rounds: int, warmup: int,
) -> dict[str, Candidate]:
    candidates = {name: build(name, config, device, compiled, backend) for name in names}
    for candidate in candidates.values():
        for x, y in batches[:warmup]:  # compilation, autotuning, the allocator's first blocks, AdamW's state
            candidate.step(x, y)
        model, optimizer = candidate.context[0], candidate.context[1]
        candidate.resident_bytes = _resident_bytes(model, optimizer)
    _sync(device)
    reset_peak, allocated, peak = _memory(device)
    tokens = steps * batches[0][0].numel()
    order = list(candidates.values())
    for round_index in range(rounds):
        shift = round_index % len(order)
        for candidate in order[shift:] + order[:shift]:
            _sync(device)
            start_bytes = allocated()
            reset_peak()
            start = time.perf_counter()
            for index in range(steps):
                x, y = batches[index % len(batches)]
                candidate.step(x, y)
            _sync(device)
            candidate.tokens_per_s.append(tokens / (time.perf_counter() - start))
            candidate.peak_bytes.append(peak() - start_bytes + candidate.resident_bytes)
    return candidates


def monitor_mfu(
    candidate: Candidate, batches: list, steps: int, flops_per_step: float, peak: float | None
) -> float | None:
    """MFU as fabricx's ThroughputMonitor reports it over ``steps`` more steps of the fabricx candidate.

    Written for Lightning's API (``update(*, time, batches, samples, lengths=None, flops=None)`` with
    cumulative counts and the FLOPs since the last update, then ``compute()``) and for fabricx's earlier
    one (``update(batch_size, items, flops)`` per step); whichever the installed fabricx has.
    """
    from fabricx.utilities.throughput import Throughput, ThroughputMonitor

    fabric = candidate.context[2]
    # ThroughputMonitor(fabric, **kwargs) passes its keywords on to Throughput: read the options there.
    parameters = {**inspect.signature(Throughput).parameters, **inspect.signature(ThroughputMonitor).parameters}
    # Rates exist once the window is full (Lightning's semantics): one window over the measured steps.
    kwargs: dict[str, Any] = {"window_size": steps} if "window_size" in parameters else {}
    if peak is not None and "peak_flops" in parameters:
        kwargs["peak_flops"] = peak
    if fabric.device.type == "cpu" and "available_flops" in inspect.signature(Throughput).parameters:
        # A CPU has no data-sheet peak (Lightning's table, which ThroughputMonitor reads, has none): the dry run
        # gives the monitor's own arithmetic (its base class) a measured peak instead.
        from fabricx.utilities.device_flops import measure_cpu_peak_flops

        monitor: Any = Throughput(available_flops=measure_cpu_peak_flops(size=256, seconds=0.1), **kwargs)
    else:
        monitor = ThroughputMonitor(fabric, **kwargs)
    lightning_api = "time" in inspect.signature(monitor.update).parameters
    batch, length = batches[0][0].shape
    start = time.perf_counter()
    for index in range(steps):
        x, y = batches[index % len(batches)]
        candidate.step(x, y)
        _sync(fabric.device)
        if lightning_api:
            done = index + 1
            monitor.update(
                time=time.perf_counter() - start, batches=done, samples=done * batch, lengths=done * batch * length,
                flops=flops_per_step,
            )
        else:
            monitor.update(batch_size=batch, items=batch * length, flops=flops_per_step)
    metrics = monitor.compute()
    for key in ("mfu", "device/mfu"):
        if metrics.get(key) is not None:
            return float(metrics[key])
    found = [value for key, value in metrics.items() if key.endswith("mfu")]
    return float(found[0]) if found else None


# Dense bf16 data-sheet figures, used where fabricx.utilities.throughput has no peak_flops() (its API moves).
_BF16_PEAKS = {"h200": 989.4e12, "h100": 989.4e12, "a100": 312e12, "l4": 121e12, "a10g": 125e12}


def device_peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    try:
        from fabricx.utilities.throughput import peak_flops

        return peak_flops(device, torch.bfloat16)
    except ImportError:
        name = torch.cuda.get_device_name(device).lower()
        return next((value for key, value in _BF16_PEAKS.items() if key in name), None)


def step_flops(config: GPTConfig, batch: int) -> int:
    from fabricx.utilities.throughput import measure_flops

    with torch.device("meta"):
        model = GPT(config)
        x = torch.zeros(batch, config.block_size, dtype=torch.long)
    return measure_flops(model, lambda: model(x, x), lambda loss: loss)


def measure(
    dry_run: bool = False, batch: int = 8, steps: int = 10, rounds: int = 5, warmup: int = 3,
    candidates: tuple[str, ...] = CANDIDATES, kinds: tuple[str, ...] = ("eager", "compiled"),
    backend: str | None = None,
) -> dict[str, Any]:
    """Rows of {kind, candidate, tokens_per_s, peak_memory_mb, ratios}, and the model's size and MFU."""
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    config = TINY if dry_run else GPTConfig()
    if dry_run:
        batch, steps, rounds, warmup = 2, 2, 2, 1
        torch.set_num_threads(1)
    # Inductor on a GPU; on the CPU dry run dynamo with the eager backend (the same path, no C++ compile).
    backend = backend or ("inductor" if device.type == "cuda" else "eager")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    present = [n for n in candidates if n in ("raw", "fabricx") or importlib.util.find_spec(n) is not None]
    batches = token_batches(config, batch, max(steps, warmup), device)
    flops = step_flops(config, batch)
    peak = device_peak_flops(device)
    if peak is None and dry_run:
        peak = 1e12  # a nominal CPU peak: the dry run checks the arithmetic, not the machine
    with torch.device("meta"):
        size = parameter_count(GPT(config))
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "parameters": size, "batch": batch, "sequence": config.block_size, "steps_per_turn": steps,
        "rounds": rounds, "compile_backend": backend, "flops_per_step": flops, "peak_flops": peak,
        "missing": sorted(set(candidates) - set(present)), "rows": rows,
    }
    for kind in kinds:
        group = run_group(present, config, device, kind == "compiled", backend, batches, steps, rounds, warmup)
        raw = group.get("raw")
        raw_tokens = statistics.median(raw.tokens_per_s) if raw else None
        raw_peak = max(raw.peak_bytes) if raw else None
        for name, candidate in group.items():
            tokens = statistics.median(candidate.tokens_per_s)
            peak_bytes = max(candidate.peak_bytes)
            row: dict[str, Any] = {
                "kind": kind, "candidate": name, "tokens_per_s": tokens, "peak_memory_mb": peak_bytes / 1e6,
                "tokens_per_s_ratio": tokens / raw_tokens if raw_tokens else None,
                "peak_memory_ratio": peak_bytes / raw_peak if raw_peak else None,
                "mfu": flops * tokens / (batch * config.block_size) / peak if peak else None,
            }
            if name == "fabricx":
                row["monitor_mfu"] = monitor_mfu(candidate, batches, max(steps, 2), flops, peak)
            rows.append(row)
        del group
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    parser.add_argument("--kinds", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    args = parser.parse_args()
    result = measure(args.dry_run, args.batch, args.steps, args.rounds, candidates=tuple(args.only),
                     kinds=tuple(args.kinds))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
