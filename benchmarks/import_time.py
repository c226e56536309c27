"""Wall time of ``import fabricx`` in a fresh interpreter, against ``import torch`` (the floor).

Each import runs in its own new process, alternating between the candidates so that a busy machine
slows them alike. ``lightning.fabric`` and ``accelerate`` are timed too where they are installed.

Run: ``python -m benchmarks.import_time [--repeats 5]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time

from benchmarks.common import interleaved

# The statement each candidate runs; "torch" is the baseline every ratio is taken against.
CANDIDATES = {
    "torch": "import torch",
    "fabricx": "import fabricx",
    "lightning": "import lightning.fabric",
    "accelerate": "import accelerate",
}


def _installed(name: str) -> bool:
    top = name.split(".")[0]
    return importlib.util.find_spec(top) is not None


def _time_import(statement: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(repeats: int = 5) -> dict[str, float]:
    """Median seconds to start Python and import each candidate; ratios against ``import torch``."""
    runs = {
        name: (lambda statement=statement: _time_import(statement))
        for name, statement in CANDIDATES.items()
        if name in ("torch", "fabricx") or _installed(name)
    }
    next(iter(runs.values()))()  # warm the file-system cache once (torch's files dominate)
    medians = interleaved(runs, repeats)
    result: dict[str, float] = {f"{name}_s": seconds for name, seconds in medians.items()}
    result["ratio"] = medians["fabricx"] / medians["torch"]
    for peer in ("lightning", "accelerate"):
        if peer in medians:
            result[f"{peer}_ratio"] = medians[peer] / medians["torch"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats), indent=2))


if __name__ == "__main__":
    main()
