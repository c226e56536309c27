"""Run every benchmark, each in a fresh process, and write a JSON file, a PNG chart and docs/benchmarks.md.

Each benchmark module exposes ``measure(**sizes) -> dict``; keys named ``ratio`` or ending in
``_ratio`` are times (or bytes) relative to plain PyTorch measured in the same run, so 1.0 means
"as fast as plain PyTorch" and lower is better. A module that is not there yet is skipped with a note.

Run: ``python -m benchmarks [--quick] [--only NAME ... [--update]] [--out DIR] [--no-docs] [--render JSON]``
(``--update``: the named benchmarks re-run, their figures put into the full run's results in place of the old)
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


# The order is the order of the report. The instruction counts (valgrind) and the 600 MB disk checkpoints make
# the full run longer than the rest together: see docs/guides/performance.md for the time of each piece.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "loop_overhead", "Training-loop overhead (1 process)", "the same loop in plain PyTorch (time per step)",
        full={"steps": 300, "repeats": 15, "instruction_steps": 20}, quick={"steps": 30, "repeats": 2},
        timeout_s=900,
    ),
    Benchmark(
        "ddp_overhead", "DDP overhead (2 CPU processes)", "hand-written torch DDP (time per step)",
        full={"steps": 200, "repeats": 3, "instruction_steps": 10}, quick={"steps": 20, "repeats": 1},
        timeout_s=2400,
    ),
    Benchmark(
        "loader_workers", "Data loader with 2 persistent workers", "the same plain DataLoader (time per batch)",
        full={"batches": 200, "repeats": 5}, quick={"batches": 40, "repeats": 1}, timeout_s=300,
    ),
    Benchmark(
        "trainer_overhead", "Trainer overhead",
        "the same training as a hand-written Fabric loop (time per step, set-up subtracted)",
        full={"steps": 300, "repeats": 5, "instruction_steps": 100}, quick={"steps": 40, "repeats": 1},
        timeout_s=2400,
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
        "launch_startup", "Launch of 2 processes to the first optimizer step", "`torchrun` with a hand-written loop",
        full={"repeats": 3}, quick={"repeats": 1}, timeout_s=600,
    ),
    Benchmark(
        "thread_default", "An example on 2 CPU processes, with and without fabricx's thread default",
        "the same example with every process given all cores (`OMP_NUM_THREADS` = cores; time from the command to "
        "its exit)",
        full={"steps": 40, "repeats": 2}, quick={"steps": 5, "repeats": 1}, timeout_s=900,
    ),
    Benchmark(
        "checkpoint_disk", "Durable save and cold load against the disk's own limit",
        "the same bytes in one buffered write + fsync / one read from a dropped page cache",
        full={"megabytes": 600, "repeats": 3}, quick={"megabytes": 8, "repeats": 1}, timeout_s=600,
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


# Stand-ins for modules that do not expose measure() (yet); a module's own measure() always wins.
_FALLBACKS: dict[str, tuple[str, Any]] = {}


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


def write_chart(found: dict[str, float], path: Path, report: dict[str, Any] | None = None) -> None:
    """The per-workload chart of :mod:`benchmarks.summary` (``found``: used when no report is given)."""
    from benchmarks.summary import write_summary_chart

    rows = summary_rows_for(report) if report is not None else [
        {"title": _readable(label), "fabricx": value} for label, value in found.items()
    ]
    write_summary_chart(rows, path)


GPU_LAST_RUN = ROOT / "benchmarks" / "gpu_last_run.json"


def load_gpu_report() -> dict[str, Any] | None:
    """The last GPU check's report (benchmarks/gpu_last_run.json, copied from a GPU machine), or None."""
    if not GPU_LAST_RUN.exists():
        return None
    return json.loads(GPU_LAST_RUN.read_text())


def summary_rows_for(report: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.summary import summary_rows

    return summary_rows(report, report.get("gpu") if "gpu" in report else load_gpu_report())


def _gpu_note(gpu: dict[str, Any] | None) -> str:
    if gpu is None:
        return "not run: no GPU was lent for this run, and no GPU run is recorded yet"
    return f"not run in this run (no GPU lent); last GPU run: {gpu['environment']['date']}"


def _readable(key: str) -> str:
    """``accumulation_cpu_time_ratio`` -> ``accumulation cpu time ratio``; ``us`` -> ``µs``."""
    words = key.replace(".", " · ").replace("_", " ").split()
    return " ".join({"us": "µs", "mb": "MB", "s": "(s)", "fabricx": "fabricx"}.get(w, w) for w in words)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def write_markdown(report: dict[str, Any], chart_name: str, path: Path) -> None:
    """The docs page: the per-workload summary and chart first, then the GPU check, then every figure."""
    from benchmarks.summary import summary_markdown

    info = report["machine"]
    gpu = report.get("gpu") if "gpu" in report else load_gpu_report()
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m benchmarks` (`make bench`); do not edit by hand. Each figure is the time fabricx",
        "(or Lightning, or Accelerate) takes for a workload relative to a baseline doing the same work in the same",
        "run, mostly plain PyTorch (the last column says which), with the candidates interleaved so that a busy",
        "machine slows them alike: 1.0 means as fast as the baseline, lower is better. Wall-clock figures on a",
        "shared 2-core machine move by a few per cent from run to run (see the A/A control of the DDP benchmark);",
        "the instruction counts do not.",
        "",
        f"Last run: {info['date']}, Python {info['python']}, torch {info['torch']}, {info['cpus']} CPUs, "
        f"load average {_format(info['load_average'])} at the start"
        f"{' (quick sizes)' if report['quick'] else ''}"
        + "".join(f", {name} {version}" for name, version in info.get("peers", {}).items())
        + ".",
        *[f"Re-run since: {', '.join(update['names'])} at {update['date']}" + (
            f" (load average {_format(update['load_average'])} at the start)." if update.get("load_average") else "."
        ) for update in report.get("updated", [])],
        "",
        "## fabricx, Lightning and Accelerate against plain PyTorch",
        "",
        *summary_markdown(summary_rows_for(report), _gpu_note(gpu)),
        "",
        f"![fabricx, Lightning and Accelerate against plain PyTorch, per workload]({chart_name})",
        "",
        "## On a GPU",
        "",
    ]
    if gpu is not None and not gpu.get("dry_run"):
        from benchmarks.gpu_check import markdown as gpu_markdown

        lines += [f"The last GPU check (`make gpu-check`, {gpu['environment']['date']}; not re-run by "
                  "`python -m benchmarks`):", "", gpu_markdown(gpu).replace("### ", "#### ")]
    else:
        lines.append(f"GPU rows: {_gpu_note(gpu)}. See the guide's GPU check to produce them.")
    lines += ["", "## Every ratio", "", "| benchmark | ratio | value | 1.0 is |", "|---|---|---|---|"]
    for label, value in report["ratios"].items():
        bench, key = label.split(".", 1)
        record = report["benchmarks"].get(bench, {})
        baseline = record.get("baseline") or _BASELINES.get(bench, "")
        lines.append(f"| {record.get('title', bench)} | {_readable(key)} | {value:.3f} | {baseline} |")
    for name, record in report["benchmarks"].items():
        lines += ["", f"## {record['title']}", "", f"`benchmarks/{name}.py`" + (
            f": {record['about']}" if record.get("about") else ""
        ), ""]
        if record["status"] != "ok":
            lines.append(f"Not measured in this run ({record['status']}: {record.get('note', '')}).")
            continue
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {_readable(key)} | {_format(value)} |" for key, value in _flatten(record["result"]).items()]
        measured = f" (measured {record['measured_at']})" if record.get("measured_at") else ""
        lines.append(f"\nSizes: `{json.dumps(record.get('kwargs', {}))}`; took {record['seconds']} s{measured}.")
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
        record["measured_at"] = report["machine"]["date"]
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
    write_chart(report["ratios"], chart_path, report)
    print(f"[benchmarks] wrote {json_path} and {chart_path} in {report['total_seconds']} s", flush=True)
    if docs:
        render_docs(report)
    return report


def merge_reports(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``base`` (a full run) with the benchmarks of ``update`` (a later run of some of them) in place of its own
    records; the page then says which were re-run, when, and on how busy a machine.

    Example:
        ```python
        report = merge_reports(json.loads(full.read_text()), json.loads(partial.read_text()))
        ```
    """
    if update.get("quick") and not base.get("quick"):
        raise SystemExit("A --quick run cannot update a full run's figures; run the benchmarks at full size.")
    merged = {**base, "benchmarks": {**base["benchmarks"], **update["benchmarks"]}}
    rerun = {"names": list(update["benchmarks"]), "date": update["machine"]["date"],
             "load_average": update["machine"]["load_average"]}
    merged["updated"] = [*base.get("updated", []), rerun]
    merged["ratios"] = ratios(merged["benchmarks"])
    return merged


def render_docs(report: dict[str, Any]) -> None:
    """Write docs/assets/benchmarks.png and docs/benchmarks.md from a report."""
    docs_dir = ROOT / "docs"
    write_chart(report["ratios"], docs_dir / "assets" / "benchmarks.png", report)
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
    parser.add_argument(
        "--update", action="store_true",
        help="with --only: put the new figures into benchmarks/results/results.json in place of the old ones",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        render_docs(json.loads(args.render.read_text()))
        return
    if args.update:
        if not args.only:
            raise SystemExit("--update re-runs some benchmarks: name them with --only.")
        results = ROOT / "benchmarks" / "results" / "results.json"
        base = json.loads(results.read_text())
        partial = run(names=args.only, quick=args.quick, out=args.out or ROOT / ".cache" / "benchmarks-update",
                      docs=False)
        merged = merge_reports(base, partial)
        results.write_text(json.dumps(merged, indent=2) + "\n")
        write_chart(merged["ratios"], results.parent / "ratios.png", merged)
        if not args.no_docs:
            render_docs(merged)
        return
    run(names=args.only, quick=args.quick, out=args.out, docs=not args.no_docs)


if __name__ == "__main__":
    main()
