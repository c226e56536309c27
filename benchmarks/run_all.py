"""Run every benchmark, each in a fresh process, and write a JSON file, a PNG chart and docs/benchmarks.md.

Each benchmark module exposes ``measure(**sizes) -> dict``; keys named ``ratio`` or ending in
``_ratio`` are times (or bytes) relative to plain PyTorch measured in the same run, so 1.0 means
"as fast as plain PyTorch" and lower is better. A module that is not there yet is skipped with a note.

Run: ``python -m benchmarks [--quick] [--only NAME ...] [--out DIR] [--no-docs] [--render JSON]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULT_PREFIX = "FABRICX_BENCH_RESULT "


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    # What a ratio of 1.0 is measured against, in the same run.
    baseline: str = "plain PyTorch"
    # Sizes for the full run and for ``--quick``; only keys that measure() accepts are passed.
    full: dict[str, Any] = field(default_factory=dict)
    quick: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 180.0

    @property
    def module(self) -> str:
        return f"benchmarks.{self.name}"


# The order is the order of the report; the full run fits in 10 minutes on 2 cores.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "loop_overhead", "Training-loop overhead (1 process)", "the same loop in plain PyTorch (time per step)",
        full={"steps": 300, "repeats": 15}, quick={"steps": 30, "repeats": 2},
    ),
    Benchmark(
        "ddp_overhead", "DDP overhead (2 CPU processes)", "hand-written torch DDP (time per step)",
        full={"steps": 200, "repeats": 3}, quick={"steps": 20, "repeats": 1}, timeout_s=150,
    ),
    Benchmark(
        "trainer_overhead", "Trainer overhead", "the same training as a hand-written Fabric loop (time per step)",
        full={"steps": 300, "repeats": 3}, quick={"steps": 30, "repeats": 1},
    ),
    Benchmark(
        "import_time", "Import time", "`import torch` in a fresh interpreter",
        full={"repeats": 3}, quick={"repeats": 1},
    ),
    Benchmark(
        "first_step", "Process start to first optimizer step", "the same script in plain PyTorch",
        full={"repeats": 3}, quick={"repeats": 1},
    ),
    Benchmark(
        "checkpoint_io", "Checkpoint save/load throughput",
        "`torch.save` / `torch.load` of the state dict (`*_vs_durable`: `torch.save` + fsync)",
        full={"megabytes": 200, "repeats": 3}, quick={"megabytes": 4, "repeats": 1},
    ),
    Benchmark(
        "resume", "Resumption: process start to first resumed batch",
        "skipping the consumed batches by iterating the loader", timeout_s=200,
    ),
    Benchmark(
        "fsdp_memory", "Per-rank memory under DDP and FSDP",
        "one process holding the whole model (bytes of parameters, gradients and optimizer state)", timeout_s=200,
    ),
    Benchmark(
        "compile_overhead", "torch.compile through Fabric (a transformer block, inductor, CPU)",
        "the same compiled block in a raw PyTorch loop (time per step)",
        full={"steps": 40, "repeats": 5}, quick={"steps": 5, "repeats": 1}, timeout_s=400,
    ),
    Benchmark(
        "peers", "Lightning Fabric and Accelerate on the same loop", "the same loop in plain PyTorch (time per step)",
        full={"steps": 300, "repeats": 15}, quick={"steps": 30, "repeats": 2},
    ),
)
_BASELINES = {bench.name: bench.baseline for bench in BENCHMARKS}

_CHILD = """
import json, sys
from benchmarks.run_all import resolve_measure
result = resolve_measure({module!r})(**json.loads(sys.argv[1]))
print({prefix!r} + json.dumps(result), flush=True)
"""


def _trainer_overhead_measure(steps: int = 300, repeats: int = 5) -> dict[str, float]:
    """Used while benchmarks/trainer_overhead.py has only a main(): its two runs, interleaved, as its main does."""
    import statistics
    import tempfile

    import torch

    from benchmarks import trainer_overhead as bench

    torch.set_num_threads(1)
    dataset = bench._data()
    loop, trainer = [], []
    with tempfile.TemporaryDirectory() as root:
        bench.run_loop(dataset, 50)
        bench.run_trainer(dataset, 50, root)
        for _ in range(repeats):
            loop.append(bench.run_loop(dataset, steps) / steps)
            trainer.append(bench.run_trainer(dataset, steps, root) / steps)
    loop_s, trainer_s = statistics.median(loop), statistics.median(trainer)
    return {"fabric_loop_us_per_step": loop_s * 1e6, "trainer_us_per_step": trainer_s * 1e6,
            "ratio": trainer_s / loop_s}


# Stand-ins for modules that do not expose measure() (yet); a module's own measure() always wins.
_FALLBACKS = {"benchmarks.trainer_overhead": ("run_trainer", _trainer_overhead_measure)}


def resolve_measure(module_name: str) -> Any:
    """The module's ``measure`` function, or a stand-in built from its other functions, or None."""
    module = importlib.import_module(module_name)
    measure = getattr(module, "measure", None)
    if callable(measure):
        return measure
    fallback = _FALLBACKS.get(module_name)
    if fallback is not None and hasattr(module, fallback[0]):
        return fallback[1]
    return None


def _accepted_kwargs(module_name: str, sizes: dict[str, Any]) -> dict[str, Any] | None:
    """The subset of ``sizes`` that the module's ``measure`` accepts; None if it has no measure()."""
    measure = resolve_measure(module_name)
    if measure is None:
        return None
    parameters = inspect.signature(measure).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(sizes)
    return {key: value for key, value in sizes.items() if key in parameters}


def run_one(bench: Benchmark, quick: bool) -> dict[str, Any]:
    """Run one benchmark in a fresh interpreter; return its record (status, seconds, result or note)."""
    record: dict[str, Any] = {"title": bench.title, "baseline": bench.baseline}
    if importlib.util.find_spec(bench.module) is None:
        return {**record, "status": "missing", "note": f"{bench.module} does not exist yet"}
    try:
        kwargs = _accepted_kwargs(bench.module, bench.quick if quick else bench.full)
    except Exception as error:  # a module that fails to import is reported, not fatal
        return {**record, "status": "error", "note": f"import failed: {type(error).__name__}: {error}"}
    if kwargs is None:
        return {**record, "status": "missing", "note": f"{bench.module} has no measure() function"}
    record["kwargs"] = kwargs
    record["about"] = _summary(importlib.import_module(bench.module).__doc__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    source = _CHILD.format(module=bench.module, prefix=RESULT_PREFIX)
    start = time.perf_counter()
    try:
        process = subprocess.run(
            [sys.executable, "-c", source, json.dumps(kwargs)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=bench.timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {**record, "status": "timeout", "note": f"did not finish within {bench.timeout_s:.0f} s"}
    record["seconds"] = round(time.perf_counter() - start, 1)
    lines = [line for line in process.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if process.returncode != 0 or not lines:
        tail = (process.stderr or process.stdout).strip().splitlines()[-5:]
        return {**record, "status": "error", "note": f"exit code {process.returncode}: " + " | ".join(tail)}
    record["status"] = "ok"
    record["result"] = json.loads(lines[-1][len(RESULT_PREFIX):])
    return record


def _summary(docstring: str | None) -> str:
    """The first paragraph of a module docstring, on one line."""
    first = (docstring or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Every ratio of every successful benchmark, keyed ``benchmark.metric``."""
    found: dict[str, float] = {}
    for name, record in results.items():
        for key, value in _flatten(record.get("result") or {}).items():
            last = key.rsplit(".", 1)[-1]
            if (last == "ratio" or last.endswith("_ratio")) and isinstance(value, int | float):
                found[f"{name}.{key}"] = float(value)
    return found


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "peers": _peer_versions(),
    }


def _peer_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("lightning", "accelerate"):
        if importlib.util.find_spec(name) is not None:
            try:
                found[name] = version(name)
            except PackageNotFoundError:
                found[name] = "(version unknown)"
    return found


def write_chart(found: dict[str, float], path: Path) -> None:
    """A horizontal bar per ratio, with the plain-PyTorch line at 1.0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(found)
    values = [found[label] for label in labels]
    height = max(2.5, 0.38 * len(labels) + 1.6)
    figure, axes = plt.subplots(figsize=(9, height))
    kinds = {"fabricx": "#3b7dd8", "peer library": "#9a9a9a", "file format": "#5aa469"}
    kind_of = [
        "peer library" if ("lightning" in label or "accelerate" in label)
        else "file format" if "safetensors" in label else "fabricx"
        for label in labels
    ]
    axes.barh(range(len(labels)), values, color=[kinds[kind] for kind in kind_of])
    from matplotlib.patches import Patch

    handles = [Patch(color=color, label=kind) for kind, color in kinds.items() if kind in kind_of]
    axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3, fontsize=8)
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.invert_yaxis()
    axes.axvline(1.0, color="black", linewidth=1, linestyle="--")
    axes.set_xscale("log")
    axes.set_xlabel("ratio to the baseline, mostly plain PyTorch (log scale; 1.0 = same, lower is better)")
    for index, value in enumerate(values):
        axes.text(value, index, f" {value:.2f}x", va="center", fontsize=8)
    axes.set_title("fabricx benchmarks")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def write_markdown(report: dict[str, Any], chart_name: str, path: Path) -> None:
    """The docs page: machine, ratio chart, and one table per benchmark."""
    info = report["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m benchmarks` (`make bench`); do not edit by hand. Every ratio compares",
        "fabricx (or a peer library) with a baseline doing the same work in the same run, mostly plain",
        "PyTorch (the last column says which), with the candidates' repeats interleaved so that a busy",
        "machine slows them alike. 1.0 means the same as the baseline; lower is better. Lightning Fabric",
        "and Accelerate are measured where they are installed. Timings on a shared machine are noisy;",
        "checkpoint loading in particular depends on what the operating system still has in its file cache.",
        "",
        f"Last run: {info['date']}, Python {info['python']}, torch {info['torch']}, {info['cpus']} CPUs, "
        f"load average {_format(info['load_average'])} at the start"
        f"{' (quick sizes)' if report['quick'] else ''}"
        + "".join(f", {name} {version}" for name, version in info.get("peers", {}).items())
        + ".",
        "",
        f"![Ratios to plain PyTorch]({chart_name})",
        "",
        "## Ratios",
        "",
        "| ratio | value | 1.0 is |",
        "|---|---|---|",
    ]
    for label, value in report["ratios"].items():
        bench = label.split(".", 1)[0]
        baseline = report["benchmarks"].get(bench, {}).get("baseline") or _BASELINES.get(bench, "")
        lines.append(f"| `{label}` | {value:.3f} | {baseline} |")
    for name, record in report["benchmarks"].items():
        lines += ["", f"## {record['title']}", "", f"`benchmarks/{name}.py`" + (
            f": {record['about']}" if record.get("about") else ""
        ), ""]
        if record["status"] != "ok":
            lines.append(f"Not measured in this run ({record['status']}: {record.get('note', '')}).")
            continue
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| `{key}` | {_format(value)} |" for key, value in _flatten(record["result"]).items()]
        lines.append(f"\nSizes: `{json.dumps(record.get('kwargs', {}))}`; took {record['seconds']} s.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def run(
    names: list[str] | None = None, quick: bool = False, out: Path | None = None, docs: bool = True
) -> dict[str, Any]:
    """Run the selected benchmarks (all by default) and write ``results.json`` and ``ratios.png`` to ``out``."""
    out = out or ROOT / "benchmarks" / "results"
    selected = [b for b in BENCHMARKS if names is None or b.name in names]
    unknown = set(names or ()) - {b.name for b in BENCHMARKS}
    if unknown:
        raise SystemExit(
            f"Unknown benchmark(s) {sorted(unknown)}; choose from {[b.name for b in BENCHMARKS]}."
        )
    report: dict[str, Any] = {"machine": machine_info(), "quick": quick, "benchmarks": {}}
    start = time.perf_counter()
    for bench in selected:
        print(f"[benchmarks] {bench.name} ...", flush=True)
        record = run_one(bench, quick)
        report["benchmarks"][bench.name] = record
        if record["status"] == "ok":
            shown = {k: round(v, 3) for k, v in ratios({bench.name: record}).items()}
            print(f"[benchmarks]   done in {record['seconds']} s: {shown}", flush=True)
        else:
            print(f"[benchmarks]   skipped ({record['status']}): {record['note']}", flush=True)
    report["ratios"] = ratios(report["benchmarks"])
    report["total_seconds"] = round(time.perf_counter() - start, 1)
    out.mkdir(parents=True, exist_ok=True)
    json_path, chart_path = out / "results.json", out / "ratios.png"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    write_chart(report["ratios"], chart_path)
    print(f"[benchmarks] wrote {json_path} and {chart_path} in {report['total_seconds']} s", flush=True)
    if docs:
        render_docs(report)
    return report


def render_docs(report: dict[str, Any]) -> None:
    """Write docs/assets/benchmarks.png and docs/benchmarks.md from a report."""
    docs_dir = ROOT / "docs"
    write_chart(report["ratios"], docs_dir / "assets" / "benchmarks.png")
    write_markdown(report, "assets/benchmarks.png", docs_dir / "benchmarks.md")
    print(f"[benchmarks] updated {docs_dir / 'benchmarks.md'}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run of a minute or two)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json and ratios.png")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md unchanged")
    parser.add_argument(
        "--render", type=Path, metavar="JSON", help="only rewrite the chart and docs/benchmarks.md from a results file"
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        render_docs(json.loads(args.render.read_text()))
        return
    run(names=args.only, quick=args.quick, out=args.out, docs=not args.no_docs)


if __name__ == "__main__":
    main()
