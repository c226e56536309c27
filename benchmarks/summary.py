"""The head of the benchmarks page: per workload, fabricx against plain PyTorch, Lightning and Accelerate, as a
table and a chart with readable labels (no internal keys), each figure a time relative to the baseline of its row
measured in the same run (1.0 = as fast as the baseline; lower is better).

Example::

    rows = summary_rows(report, gpu_report)
    write_summary_chart(rows, Path("docs/assets/benchmarks.png"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

COLUMNS = ("fabricx", "Lightning", "Accelerate")


@dataclass(frozen=True)
class Workload:
    title: str
    baseline: str  # what 1.0 is
    # column -> (benchmark name, result key); the value is a time ratio (lower is better)
    sources: dict[str, tuple[str, str]]
    target: str = ""
    # (benchmark, key, label) of a figure shown beside the baseline: the A/A control of a wall-clock ratio
    note: tuple[str, str, str] | None = None


WORKLOADS: tuple[Workload, ...] = (
    Workload("Training loop, 1 CPU process", "the loop in plain PyTorch (time per step)",
             {"fabricx": ("loop_overhead", "ratio"), "Lightning": ("peers", "lightning_ratio"),
              "Accelerate": ("peers", "accelerate_ratio")}, "≤ 1.03"),
    Workload("Training loop, 1 CPU process, in instructions", "the loop in plain PyTorch (instructions per step)",
             {"fabricx": ("loop_overhead", "instructions_ratio")}, "≤ 1.02"),
    Workload("DDP loop, 2 CPU processes", "hand-written torch DDP (time per step)",
             {"fabricx": ("ddp_overhead", "ratio")}, "≤ 1.03",
             note=("ddp_overhead", "control_ratio", "A/A control of two identical hand-written loops")),
    Workload("DDP loop, 2 CPU processes, in instructions (rank 0)",
             "hand-written torch DDP (instructions per step)",
             {"fabricx": ("ddp_overhead", "rank0_instructions_ratio")}, "≤ 1.02"),
    Workload("Data loader with 2 persistent workers", "the plain DataLoader (time per batch)",
             {"fabricx": ("loader_workers", "ratio")}, "≤ 1.02"),
    # A step of a 32-64-1 MLP is almost nothing: these three rows set a Trainer's fixed cost per step against it
    # (below Lightning's is the target); the Trainer's own work and the millisecond step below carry the ≤ targets.
    Workload("Trainer with LightningModule code", "the same training as a hand-written Fabric loop (time per step)",
             {"fabricx": ("trainer_overhead", "ratio"), "Lightning": ("trainer_overhead", "lightning_trainer_ratio")},
             "below Lightning"),
    Workload("Trainer with LightningModule code, steady state",
             "the same hand-written Fabric loop (time per step inside one run, past its first 60 steps)",
             {"fabricx": ("trainer_overhead", "steady_ratio"),
              "Lightning": ("trainer_overhead", "lightning_trainer_steady_ratio")}, "below Lightning"),
    Workload("Trainer with LightningModule code, in instructions",
             "the same hand-written Fabric loop (instructions per step)",
             {"fabricx": ("trainer_overhead", "instructions_ratio"),
              "Lightning": ("trainer_overhead", "lightning_trainer_instructions_ratio")}, "below Lightning"),
    Workload("Trainer's own work, in instructions (the module not calling self.log)",
             "a Fabric loop calling the same module's training_step (instructions per step)",
             {"fabricx": ("trainer_overhead", "own_work_instructions_ratio")}, "≤ 1.03"),
    Workload("Trainer on a transformer block (a step of milliseconds)",
             "a Fabric loop calling the same module's training_step (time per step)",
             {"fabricx": ("trainer_overhead", "transformer_ratio")}, "≤ 1.02"),
    Workload("torch.compile'd transformer block", "the compiled block in a raw PyTorch loop (time per step)",
             {"fabricx": ("compile_overhead", "ratio")}),
    Workload("Import", "`import torch`", {"fabricx": ("import_time", "ratio"),
                                         "Lightning": ("import_time", "lightning_ratio"),
                                         "Accelerate": ("import_time", "accelerate_ratio")}),
    Workload("Process start to first step, 1 process", "the script in plain PyTorch",
             {"fabricx": ("first_step", "ratio"), "Lightning": ("first_step", "lightning_ratio"),
              "Accelerate": ("first_step", "accelerate_ratio")}),
    Workload("Launch of 2 processes to first step", "`torchrun` with a hand-written loop",
             {"fabricx": ("launch_startup", "ratio"), "Lightning": ("launch_startup", "lightning_ratio"),
              "Accelerate": ("launch_startup", "accelerate_ratio")}, "≤ 1.1"),
    Workload("An example on 2 CPU processes (char_gpt, DDP), with the thread default",
             "the same example with each process given all cores (time from the command to its exit)",
             {"fabricx": ("thread_default", "ratio")}),
    Workload("Durable checkpoint save, 600 MB", "one buffered write + fsync of the same bytes (the disk's limit)",
             {"fabricx": ("checkpoint_disk", "save_ratio")}, "≤ 1.25 (≥ 0.8 of the disk)"),
    Workload("Cold checkpoint load, 600 MB", "one read of the same bytes from a dropped page cache",
             {"fabricx": ("checkpoint_disk", "load_ratio")}, "≤ 1.25 (≥ 0.8 of the disk)"),
    Workload("Training step blocked by a checkpoint save", "`torch.save` + fsync of the same state",
             {"fabricx": ("checkpoint_io", "blocked_async_ratio")}),
)
GPU_WORKLOADS = (("eager", "GPT-2 small on one GPU, eager"), ("compiled", "GPT-2 small on one GPU, compiled"))
_GPU_COLUMNS = {"fabricx": "fabricx", "lightning": "Lightning", "accelerate": "Accelerate"}


def _value(report: dict[str, Any], bench: str, key: str) -> float | None:
    record = report.get("benchmarks", {}).get(bench) or {}
    value: Any = record.get("result") or {}
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) else None


def summary_rows(report: dict[str, Any], gpu: dict[str, Any] | None) -> list[dict[str, Any]]:
    """[{title, baseline, target, fabricx, Lightning, Accelerate}] for every workload with a figure."""
    rows = []
    for workload in WORKLOADS:
        values = {column: _value(report, *source) for column, source in workload.sources.items()}
        if any(v is not None for v in values.values()):
            baseline = workload.baseline
            if workload.note is not None and (noted := _value(report, workload.note[0], workload.note[1])) is not None:
                baseline += f"; {workload.note[2]}: {noted:.3f}"
            rows.append({"title": workload.title, "baseline": baseline, "target": workload.target, **values})
    throughput = ((gpu or {}).get("parts") or {}).get("throughput") or {}
    if "result" in throughput and not gpu.get("dry_run"):  # type: ignore[union-attr]
        for kind, title in GPU_WORKLOADS:
            row: dict[str, Any] = {"title": title, "baseline": "raw PyTorch, bf16-mixed (time per token)",
                                   "target": "≤ 1.02", "gpu": True}
            for entry in throughput["result"]["rows"]:
                column = _GPU_COLUMNS.get(entry["candidate"])
                if entry["kind"] == kind and column and entry.get("tokens_per_s_ratio"):
                    row[column] = 1.0 / entry["tokens_per_s_ratio"]
            rows.append(row)
    return rows


def summary_markdown(rows: list[dict[str, Any]], gpu_note: str) -> list[str]:
    lines = [
        "| workload | 1.0 is | fabricx | Lightning | Accelerate | target for fabricx |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = ["-" if row.get(column) is None else f"{row[column]:.2f}" for column in COLUMNS]
        lines.append(f"| {row['title']} | {row['baseline']} | " + " | ".join(cells) + f" | {row['target']} |")
    if not any(row.get("gpu") for row in rows):
        lines.append(f"| GPT-2 small on one GPU (eager, compiled) | raw PyTorch, bf16-mixed ({gpu_note}) | not run | "
                     "not run | not run | ≤ 1.02 |")
    return lines


def write_summary_chart(rows: list[dict[str, Any]], path: Path) -> None:
    """Grouped horizontal bars per workload (fabricx, Lightning, Accelerate), a linear axis, 1.0 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"fabricx": "#3b7dd8", "Lightning": "#7b52ab", "Accelerate": "#e0a030"}
    height = max(3.0, 0.55 * len(rows) + 1.6)
    figure, axes = plt.subplots(figsize=(10, height))
    bar = 0.26
    largest = 1.0
    for index, row in enumerate(rows):
        present = [column for column in COLUMNS if row.get(column) is not None]
        for slot, column in enumerate(present):
            offset = (slot - (len(present) - 1) / 2) * bar
            value = row[column]
            largest = max(largest, value)
            axes.barh(index + offset, value, height=bar * 0.92, color=colors[column])
            axes.text(value, index + offset, f" {value:.2f}", va="center", fontsize=7)
    axes.set_yticks(range(len(rows)), [row["title"] for row in rows], fontsize=8)
    axes.invert_yaxis()
    axes.axvline(1.0, color="black", linewidth=1, linestyle="--")
    axes.set_xlim(0, largest * 1.12)
    axes.set_xlabel("time relative to the row's baseline, mostly plain PyTorch (1.0 = the same; lower is better)")
    from matplotlib.patches import Patch

    axes.legend(handles=[Patch(color=c, label=n) for n, c in colors.items()], loc="lower right", fontsize=8)
    axes.set_title("fabricx, Lightning and Accelerate against plain PyTorch, per workload")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
