"""Imports fabricx makes after start-up (rich in Trainer.fit, tensorboard in its logger, ...) leave every
random stream as it was: a run whose late imports happen during ``fit`` ends with the same Python,
NumPy and torch generator states as one where those modules were imported before seeding."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_SCRIPT = textwrap.dedent(
    """
    import io, json, random, sys
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    LATE = ["rich.console", "rich.progress", "rich.table", "torch.utils.tensorboard"]
    pre_import = sys.argv[1] == "pre"
    if pre_import:
        import importlib
        for name in LATE:
            importlib.import_module(name)
    import fabricx
    from fabricx.callbacks import RichModelSummary, RichProgressBar
    from fabricx.loggers import CSVLogger, TensorBoardLogger
    from fabricx.train import Trainer, TrainModule

    late = [name for name in LATE if name in sys.modules]
    assert late == (LATE if pre_import else []), late  # `import fabricx` imports none of them

    class Model(TrainModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.arange(32.0).view(8, 4) / 32, torch.ones(8, 1))
    model = Model()
    random.seed(5); np.random.seed(5); torch.manual_seed(5)
    root = sys.argv[2]
    trainer = Trainer(
        accelerator="cpu", devices=1, max_epochs=2, default_root_dir=root,
        callbacks=[RichProgressBar(console_kwargs={"force_terminal": True, "file": io.StringIO()}), RichModelSummary()],
        loggers=[CSVLogger(root, name="csv"), TensorBoardLogger(root, name="tb")],
        enable_checkpointing=False, log_every_n_steps=1,
    )
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    assert all(name in sys.modules for name in LATE), [n for n in LATE if n not in sys.modules]  # imported by fit
    print(json.dumps({
        "python": random.random(),
        "numpy": float(np.random.rand()),
        "torch": torch.rand(()).item(),
    }))
    """
)


def _run(tmp_path: Path, mode: str) -> dict[str, float]:
    script = tmp_path / "late_imports.py"
    script.write_text(_SCRIPT)
    root = tmp_path / mode
    done = subprocess.run(
        [sys.executable, str(script), mode, str(root)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_late_imports_during_fit_leave_every_random_stream_alone(tmp_path):
    # Fresh processes: one imports the late modules before seeding, one lets fit import them.
    assert _run(tmp_path, "lazy") == _run(tmp_path, "pre")


@pytest.mark.parametrize(("how", "untouched"), [("import rich.console", False), ("lazy_import('rich.console')", True)])
def test_rich_console_draws_at_import_unless_imported_through_lazy_import(how, untouched):
    """The detector works: a plain import of rich.console moves Python's random stream."""
    code = (
        "import random; from fabricx.utilities.imports import lazy_import\n"
        f"random.seed(0); expected = random.random(); random.seed(0)\n{how}\nprint(random.random() == expected)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(untouched)]
