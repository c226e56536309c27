"""The GPU check: the suite's CUDA tests, a throughput table (GPT-2 small through raw PyTorch, fabricx, Lightning
Fabric and Accelerate) and a checkpoint table, in one command that fits in 8 minutes on one H200.

Writes ``gpu-check.json`` and ``gpu-check.md`` to the folder given with ``--out`` and exits with 1 if any
test fails or any part does not finish (a part that breaks is reported and the others still run).
Targets (tokens/s >= 0.98x raw PyTorch, peak memory <= 1.02x) are marked in the tables, not enforced
by the exit code: a GPU lent for minutes should bring back every figure. Each part runs in its own
process with its own time limit. ``--dry-run`` runs all of it on the CPU with tiny sizes (part of the
fast test suite), so the script is known to work before a GPU is lent.

Run (see docs/guides/performance.md): ``make gpu-check GPU_OUT=DIR`` or
``PYTHONPATH=. python -m benchmarks.gpu_check --out DIR [--dry-run] [--skip tests throughput checkpoint]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULT_PREFIX = "FABRICX_GPU_CHECK_RESULT "
PARTS = ("tests", "throughput", "checkpoint")
# Most seconds per part on the GPU, 480 s in all (8 minutes); the compiled throughput table runs in a process of its
# own, so a compilation that takes longer than planned costs that table alone.
TIME_LIMITS = {"tests": 140, "throughput": 80, "throughput_compiled": 200, "checkpoint": 60}
TOKENS_TARGET, MEMORY_TARGET = 0.98, 1.02

_CHILD = """
import json, sys
from {module} import measure
print({prefix!r} + json.dumps(measure(**json.loads(sys.argv[1]))), flush=True)
"""


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # cuBLAS is deterministic (the exact-resume test) only with a workspace size set before its first use.
    return {**os.environ, "PYTHONPATH": path, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def run_measure(module: str, kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``module.measure(**kwargs)`` in a fresh interpreter: {"status", "seconds", "result" | "note"}."""
    start = time.perf_counter()
    source = _CHILD.format(module=module, prefix=RESULT_PREFIX)
    try:
        process = subprocess.run(
            [sys.executable, "-c", source, json.dumps(kwargs)], cwd=ROOT, env=_env(),
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": round(timeout, 1), "note": f"did not finish within {timeout:.0f} s"}
    seconds = round(time.perf_counter() - start, 1)
    lines = [line for line in process.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if process.returncode != 0 or not lines:
        tail = (process.stderr or process.stdout).strip().splitlines()[-8:]
        return {"status": "error", "seconds": seconds, "note": f"exit code {process.returncode}: " + " | ".join(tail)}
    return {"status": "ok", "seconds": seconds, "result": json.loads(lines[-1][len(RESULT_PREFIX):])}


def run_tests(out: Path, timeout: float, on_gpu: bool) -> dict[str, Any]:
    """pytest on tests/gpu; every test must pass on a GPU (a skip there means CUDA went undetected)."""
    report = out / "gpu-tests.xml"
    start = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    try:
        process = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": timeout, "note": f"pytest did not finish within {timeout:.0f} s"}
    seconds = round(time.perf_counter() - start, 1)
    (out / "gpu-tests.log").write_text(process.stdout + process.stderr)
    if not report.exists():
        tail = (process.stdout + process.stderr).strip().splitlines()[-8:]
        return {"status": "error", "seconds": seconds, "note": "no test report: " + " | ".join(tail)}
    cases = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = (found.get("message") or "").splitlines()[0][:200] if found.get("message") else ""
                break
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        cases.append({"test": name, "outcome": outcome, "seconds": float(case.get("time") or 0), "detail": detail})
    counts = {kind: sum(c["outcome"] == kind for c in cases) for kind in ("passed", "failed", "error", "skipped")}
    broken = counts["failed"] + counts["error"] + (counts["skipped"] if on_gpu else 0)
    status = "ok" if broken == 0 and cases and process.returncode in (0, 5) else "failed"
    if not on_gpu and counts["passed"] + counts["failed"] + counts["error"] == 0:
        status = "ok"  # on a CPU every CUDA test skips, with its reason: the dry run checks they are collected
    return {"status": status, "seconds": seconds, "result": {"counts": counts, "cases": cases}}


def _throughput(dry_run: bool, eager_limit: float, compiled_limit: float) -> dict[str, Any]:
    """The eager and the compiled tables, each measured in its own process, as one part."""
    eager = run_measure("benchmarks.gpu_throughput", {"dry_run": dry_run, "kinds": ["eager"]}, eager_limit)
    compiled = run_measure("benchmarks.gpu_throughput", {"dry_run": dry_run, "kinds": ["compiled"]}, compiled_limit)
    seconds = round(eager["seconds"] + compiled["seconds"], 1)
    done = [run for run in (eager, compiled) if run["status"] == "ok"]
    if not done:
        return {"status": eager["status"], "seconds": seconds, "note": f"eager: {eager.get('note')}; "
                f"compiled: {compiled.get('note')}"}
    result = dict(done[0]["result"])
    result["rows"] = [row for run in done for row in run["result"]["rows"]]
    failed = [(kind, run) for kind, run in (("eager", eager), ("compiled", compiled)) if run["status"] != "ok"]
    record: dict[str, Any] = {"status": "ok" if not failed else failed[0][1]["status"], "seconds": seconds,
                              "result": result}
    if failed:
        record["note"] = "; ".join(f"{kind}: {run['status']}: {run.get('note', '')}" for kind, run in failed)
    return record


def environment() -> dict[str, Any]:
    import importlib.metadata as metadata

    import torch

    versions = {}
    for name in ("torch", "lightning", "accelerate", "torchdata"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "versions": versions,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "fabricx_commit": commit.stdout.strip() or None,
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def _mark(value: float | None, target: float, higher_is_better: bool) -> str:
    if value is None:
        return "-"
    met = value >= target if higher_is_better else value <= target
    return f"{value:.3f}" + ("" if met else " (target missed)")


NAMES = {"raw": "raw PyTorch", "fabricx": "fabricx", "lightning": "Lightning Fabric", "accelerate": "Accelerate"}


def markdown(report: dict[str, Any]) -> str:
    """The tables of a report, as Markdown (also used by docs/benchmarks.md)."""
    env = report["environment"]
    lines = [
        f"GPU check of {env['date']}{' (dry run on the CPU, tiny sizes)' if report.get('dry_run') else ''}: "
        f"{env.get('gpu') or 'no GPU'}, CUDA {env.get('cuda')}, Python {env['python']}, "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
        + f", fabricx {env.get('fabricx_commit')}. Overall: **{report['status']}** in {report['seconds']} s.",
        "",
    ]
    parts = report["parts"]
    tests = parts.get("tests")
    if tests:
        lines += ["### CUDA tests", ""]
        if tests["status"] in ("ok", "failed") and "result" in tests:
            counts = tests["result"]["counts"]
            lines.append(", ".join(f"{v} {k}" for k, v in counts.items()) + f" in {tests['seconds']} s.")
            bad = [c for c in tests["result"]["cases"] if c["outcome"] in ("failed", "error")]
            if bad:
                lines += ["", "| test | outcome | message |", "|---|---|---|"]
                lines += [f"| `{c['test']}` | {c['outcome']} | {c['detail']} |" for c in bad]
        else:
            lines.append(f"Not finished ({tests['status']}: {tests.get('note', '')}).")
        lines.append("")
    throughput = parts.get("throughput")
    if throughput:
        lines += ["### Training throughput (GPT-2 small, bf16-mixed, fused AdamW)", ""]
        if "result" in throughput:
            if throughput["status"] != "ok":
                lines += [f"Partly finished ({throughput['status']}: {throughput.get('note', '')}).", ""]
            r = throughput["result"]
            lines.append(
                f"{r['parameters'] / 1e6:.3g}M parameters, batch {r['batch']} x {r['sequence']} tokens on "
                f"{r['device']}, {r['rounds']} interleaved rounds of {r['steps_per_turn']} steps, compiled with "
                f"`{r['compile_backend']}`; "
                f"MFU against {_fmt(r['peak_flops'])} FLOP/s."
                + (f" Not installed: {', '.join(r['missing'])}." if r.get("missing") else "")
            )
            lines += ["", "| model | library | tokens/s | vs raw PyTorch | peak memory (MB) | vs raw PyTorch | MFU |",
                      "|---|---|---|---|---|---|---|"]
            for row in r["rows"]:
                mfu = row.get("mfu")
                mfu_text = "-" if mfu is None else f"{mfu:.1%}"
                if row.get("monitor_mfu") is not None:
                    mfu_text += f" (ThroughputMonitor: {row['monitor_mfu']:.1%})"
                lines.append(
                    f"| {row['kind']} | {NAMES.get(row['candidate'], row['candidate'])} | "
                    f"{_fmt(row['tokens_per_s'])} | "
                    f"{_mark(row['tokens_per_s_ratio'], TOKENS_TARGET, True)} | {_fmt(row['peak_memory_mb'])} | "
                    f"{_mark(row['peak_memory_ratio'], MEMORY_TARGET, False)} | {mfu_text} |"
                )
        else:
            lines.append(f"Not finished ({throughput['status']}: {throughput.get('note', '')}).")
        lines.append("")
    checkpoint = parts.get("checkpoint")
    if checkpoint:
        lines += ["### Checkpoint of model + optimizer: time the training loop is blocked", ""]
        if checkpoint["status"] == "ok":
            r = checkpoint["result"]
            lines += [f"{r['state_mb']:,.0f} MB of state on {r['device']}, median of {r['repeats']}.", "",
                      "| save | blocked (s) | vs torch.save + fsync | complete on disk (s) |", "|---|---|---|---|"]
            lines += [
                f"| {row['save']} | {row['blocked_s']:.3f} | {row['blocked_ratio']:.2f} | {row['complete_s']:.3f} |"
                for row in r["rows"]
            ]
        else:
            lines.append(f"Not finished ({checkpoint['status']}: {checkpoint.get('note', '')}).")
        lines.append("")
    return "\n".join(lines)


def run(out: Path, dry_run: bool = False, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    on_gpu = torch.cuda.is_available() and not dry_run
    if not on_gpu and not dry_run:
        raise SystemExit("No CUDA device here: run with --dry-run to check the script on the CPU.")
    start = time.perf_counter()
    parts: dict[str, Any] = {}
    for part in PARTS:
        if part in skip:
            continue
        print(f"[gpu-check] {part} ...", flush=True)
        limit = TIME_LIMITS[part] * (3 if dry_run else 1)  # a loaded CPU is slower than the GPU
        if part == "tests":
            parts[part] = run_tests(out, limit, on_gpu)
        elif part == "throughput":
            parts[part] = _throughput(dry_run, limit, TIME_LIMITS["throughput_compiled"] * (3 if dry_run else 1))
        else:
            parts[part] = run_measure(f"benchmarks.gpu_{part}", {"dry_run": dry_run}, limit)
        print(f"[gpu-check]   {parts[part]['status']} in {parts[part]['seconds']} s", flush=True)
    report = {
        "environment": environment(), "dry_run": dry_run, "parts": parts,
        "status": "ok" if all(p["status"] == "ok" for p in parts.values()) else "failed",
        "seconds": round(time.perf_counter() - start, 1),
    }
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu-check.md").write_text(markdown(report) + "\n")
    print(f"[gpu-check] {report['status']} in {report['seconds']} s; wrote {out / 'gpu-check.json'} and "
          f"{out / 'gpu-check.md'}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu-check.json and gpu-check.md")
    parser.add_argument("--dry-run", action="store_true", help="everything on the CPU with tiny sizes")
    parser.add_argument("--skip", nargs="+", default=[], choices=PARTS)
    args = parser.parse_args(argv)
    report = run(args.out, args.dry_run, tuple(args.skip))
    return 0 if report["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
