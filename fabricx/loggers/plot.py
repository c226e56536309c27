"""A picture of a run: every metric a CSV logger wrote, plotted against the step."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

from fabricx.loggers.csv_logs import METRICS_FILE
from fabricx.utilities.imports import lazy_import, require

_NOT_METRICS = {"step", "epoch"}


def read_metrics(metrics_file: str | os.PathLike) -> dict[str, list[tuple[float, float]]]:
    """Each metric column of a ``metrics.csv`` as ``(step, value)`` pairs, rows without a value left out.

    Example:
        ```python
        # [(0.0, 2.3), (1.0, 2.1)]
        read_metrics("runs/lightning_logs/version_0/metrics.csv")["train_loss"][:2]
        ```
    """
    series: dict[str, list[tuple[float, float]]] = {}
    with open(metrics_file, newline="") as handle:
        for row_number, row in enumerate(csv.DictReader(handle)):
            step = _number(row.get("step"))
            x = float(row_number) if step is None else step
            for name, text in row.items():
                value = _number(text)
                if name is None or name in _NOT_METRICS or value is None:
                    continue
                series.setdefault(name, []).append((x, value))
    return series


def find_metric_files(run_dir: str | os.PathLike) -> list[Path]:
    """The ``metrics.csv`` files at or below ``run_dir`` (one per logger version), sorted."""
    root = Path(run_dir)
    if root.is_file():
        return [root]
    return sorted(root.rglob(METRICS_FILE))


def plot_run(run_dir: str | os.PathLike, output: str | os.PathLike | None = None) -> Path:
    """Write a PNG with one panel per metric (loss, metrics, throughput) of every CSV log under ``run_dir``.

    Versions of the same experiment share the panels, one line each. Returns the PNG's path
    (``{run_dir}/metrics.png`` by default).

    Example:
        ```python
        path = plot_run("demo_runs")  # demo_runs/metrics.png
        ```
    """
    files = find_metric_files(run_dir)
    if not files:
        raise FileNotFoundError(
            f"No {METRICS_FILE} found at or below {os.fspath(run_dir)!r}. Point `fabricx plot` at the folder a "
            "CSVLogger wrote (its root_dir, or a version_N folder)."
        )
    runs = {_label(path, Path(run_dir)): read_metrics(path) for path in files}
    # Losses and metrics first, then throughput and other diagnostics grouped under a "/" prefix.
    names = sorted({name for series in runs.values() for name in series}, key=lambda n: ("/" in n, n))
    if not names:
        raise ValueError(f"The metric files under {os.fspath(run_dir)!r} hold no numeric values to plot.")
    matplotlib = require("matplotlib", extra="plot", feature="fabricx plot")
    matplotlib.use("Agg")  # files only; no display is needed or wanted
    plt = lazy_import("matplotlib.pyplot")

    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.2 * rows), squeeze=False)
    for index, name in enumerate(names):
        axis = axes[index // columns][index % columns]
        for label, series in runs.items():
            points = series.get(name)
            if points:
                axis.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    marker="." if len(points) < 30 else None,
                    label=label,
                )
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        if len(runs) > 1:
            axis.legend(fontsize="small")
    for index in range(len(names), rows * columns):
        axes[index // columns][index % columns].axis("off")
    figure.tight_layout()
    target = (
        Path(output)
        if output is not None
        else (Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent) / "metrics.png"
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=100)
    plt.close(figure)
    return target


def _label(path: Path, root: Path) -> str:
    try:
        relative = path.parent.relative_to(root)
    except ValueError:
        relative = path.parent
    return str(relative) if str(relative) != "." else path.parent.name


def _number(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
