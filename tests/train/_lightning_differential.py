"""Runs ``lightning_source/cases.py`` (or another source there) through Lightning and, imports swapped, through fabricx.

``python _lightning_differential.py OUT_DIR [--source=NAME] [case ...]`` writes ``OUT_DIR/lightning.pt`` and
``OUT_DIR/fabricx.pt``: for each case of ``lightning_source/NAME.py`` (``cases`` unless given) its result, or
the error it raised. Both copies of the source are written next to the results, so a failure can be rerun by
hand.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "lightning_source"
SWAPS = {
    "from lightning.pytorch import LightningDataModule, LightningModule, Trainer": (
        "from fabricx.train import DataModule as LightningDataModule, TrainModule as LightningModule, Trainer"
    ),
    "from lightning.pytorch.callbacks import Callback, ModelCheckpoint": (
        "from fabricx.callbacks import Callback, ModelCheckpoint"
    ),
    "from lightning.pytorch.callbacks import (\n    BasePredictionWriter,\n    Callback,\n    EMAWeightAveraging,\n"
    "    GradientAccumulationScheduler,\n    ModelCheckpoint,\n)": (
        "from fabricx.callbacks import BasePredictionWriter, Callback, EMAWeightAveraging, "
        "GradientAccumulationScheduler, ModelCheckpoint"
    ),
    "from lightning.pytorch.callbacks import BasePredictionWriter, Callback, ModelCheckpoint": (
        "from fabricx.callbacks import BasePredictionWriter, Callback, ModelCheckpoint"
    ),
    "from lightning.pytorch.loggers import CSVLogger, Logger": "from fabricx.loggers import CSVLogger, Logger",
    "from lightning.pytorch.loggers import CSVLogger": "from fabricx.loggers import CSVLogger",
    # Before the lines it starts with: the longer line is swapped whole.
    "from lightning.pytorch.plugins import AsyncCheckpointIO, DoublePrecision, TorchCheckpointIO": (
        "from fabricx.checkpoint.async_checkpoint_io import AsyncCheckpointIO\n"
        "from fabricx.checkpoint.torch_checkpoint_io import TorchCheckpointIO\n"
        "from fabricx.precision import DoublePrecision"
    ),
    "from lightning.pytorch.plugins import DoublePrecision, TorchCheckpointIO": (
        "from fabricx.checkpoint.torch_checkpoint_io import TorchCheckpointIO\n"
        "from fabricx.precision import DoublePrecision"
    ),
    "from lightning.pytorch.plugins import DoublePrecision": "from fabricx.precision import DoublePrecision",
    "from lightning.pytorch.core.saving import _load_state": (
        "from fabricx.train.checkpoint.lightning_files import module_from_state as _load_state"
    ),
    "from lightning.pytorch.trainer.states import RunningStage": "from fabricx.train.states import RunningStage",
    "from lightning.pytorch.utilities.parsing import get_init_args": (
        "from fabricx.train.module.hparams import get_init_args"
    ),
}


def write_sources(folder: Path, source: Path) -> None:
    """``cases_lightning.py`` (the source as is) and ``cases_fabricx.py`` (only the imports differ)."""
    text = source.read_text()
    swapped = text
    for lightning, fabricx in SWAPS.items():
        swapped = swapped.replace(lightning, fabricx)
    # Every lightning import must have been swapped (a changed import line shows up here).
    left = [line for line in swapped.splitlines() if line.lstrip().startswith(("from lightning", "import lightning"))]
    if left:
        raise RuntimeError(f"{source} imports lightning beyond the swapped lines: {left}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cases_lightning.py").write_text(text)
    (folder / "cases_fabricx.py").write_text(swapped)


def run_side(side: str, out: Path, names: list[str]) -> None:
    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(f"cases_{side}")
    results = {}
    for name in names or list(module.CASES):
        root = out / side / name
        root.mkdir(parents=True, exist_ok=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results[name] = {"ok": module.CASES[name](str(root))}
        except BaseException as error:  # recorded, so that the other cases still run
            results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    torch.save(results, out / f"{side}.pt")


def run_both(out: Path, source: str = "cases", timeout: float = 840) -> dict:
    """Run every case of ``lightning_source/{source}.py`` on both sides in one subprocess; the loaded results."""
    import subprocess

    import torch

    command = [sys.executable, str(Path(__file__).resolve()), str(out), f"--source={source}"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return {side: torch.load(out / f"{side}.pt", weights_only=False) for side in ("lightning", "fabricx")}


def case(results: dict, name: str) -> tuple:
    """``(lightning's result, fabricx's result)`` of case ``name``; a side that raised fails with its traceback."""
    both = {}
    for side in ("lightning", "fabricx"):
        entry = results[side][name]
        assert "ok" in entry, f"{side} failed on {name}:\n{entry.get('traceback')}"
        both[side] = entry["ok"]
    return both["lightning"], both["fabricx"]


def same_weights(expected: dict, actual: dict) -> None:
    """The same tensors under the same names: equal values and dtypes (bit for bit on CPU)."""
    import torch

    assert expected.keys() == actual.keys()
    for key, value in expected.items():
        assert actual[key].dtype == value.dtype, key
        assert torch.equal(actual[key], value), key


def main() -> None:
    out = Path(sys.argv[1])
    names = sys.argv[2:]
    source = "cases"
    if names and names[0].startswith("--source="):
        source = names.pop(0).removeprefix("--source=")
    sources = out / "sources"
    write_sources(sources, SOURCES / f"{source}.py")
    sys.path.insert(0, str(sources))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(sources), os.environ.get("PYTHONPATH", "")])
    for side in ("fabricx", "lightning"):
        run_side(side, out, names)


if __name__ == "__main__":
    main()
