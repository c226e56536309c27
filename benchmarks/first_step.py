"""Time from process start to the first optimizer step: fabricx against the same script in plain PyTorch.

Each candidate is a complete small script (imports, model, data loader, one step) run in a fresh
interpreter; the clock starts just before the process is created and stops when the child reports
that its first ``optimizer.step()`` returned. Candidates alternate. Lightning Fabric and Accelerate
run the same script where installed.

Run: ``python -m benchmarks.first_step [--repeats 5]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time

from benchmarks.common import interleaved

_PRELUDE = """
import time, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(256, 32), torch.randn(256, 1)), batch_size=32, shuffle=True)
"""

_STEP = """
x, y = next(iter(loader))
loss = nn.functional.mse_loss(model(x), y)
{backward}
optimizer.step()
print(time.time())
"""

# name -> (module that must be installed, set-up code, backward call)
_SCRIPTS: dict[str, tuple[str | None, str, str]] = {
    "plain": (None, "", "loss.backward()"),
    "fabricx": (
        None,
        "from fabricx import Fabric\n"
        "fabric = Fabric(accelerator='cpu')\n"
        "model, optimizer = fabric.setup(model, optimizer)\n"
        "loader = fabric.setup_dataloaders(loader)\n",
        "fabric.backward(loss)",
    ),
    "lightning": (
        "lightning",
        "from lightning.fabric import Fabric\n"
        "fabric = Fabric(accelerator='cpu', devices=1)\n"
        "model, optimizer = fabric.setup(model, optimizer)\n"
        "loader = fabric.setup_dataloaders(loader)\n",
        "fabric.backward(loss)",
    ),
    "accelerate": (
        "accelerate",
        "from accelerate import Accelerator\n"
        "accelerator = Accelerator(cpu=True)\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n",
        "accelerator.backward(loss)",
    ),
}


def script_for(name: str) -> str:
    """The complete Python source a candidate runs."""
    _, setup, backward = _SCRIPTS[name]
    return _PRELUDE + setup + _STEP.format(backward=backward)


def _time_to_first_step(source: str) -> float:
    start = time.time()
    output = subprocess.run([sys.executable, "-c", source], check=True, capture_output=True, text=True).stdout
    return float(output.strip().splitlines()[-1]) - start


def measure(repeats: int = 5) -> dict[str, float]:
    """Median seconds from process start to the first optimizer step; ratio against plain PyTorch."""
    runs = {}
    for name, (requirement, _, _) in _SCRIPTS.items():
        if requirement is not None and importlib.util.find_spec(requirement) is None:
            continue
        runs[name] = lambda source=script_for(name): _time_to_first_step(source)
    next(iter(runs.values()))()  # warm the file-system cache once (torch's files dominate)
    medians = interleaved(runs, repeats)
    result: dict[str, float] = {f"{name}_s": seconds for name, seconds in medians.items()}
    result["ratio"] = medians["fabricx"] / medians["plain"]
    for peer in ("lightning", "accelerate"):
        if peer in medians:
            result[f"{peer}_ratio"] = medians[peer] / medians["plain"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats), indent=2))


if __name__ == "__main__":
    main()
