"""A checkpoint whose model a strategy stores itself (FSDP's DCP shards) is read in two parts: the
shared files by name under a pin on the directory, then the shards. A save that replaces the
checkpoint between the two must not give a load that mixes them (issue 25, item 1, for the files
inside a checkpoint): one process loads again and gets one save whole; the shards are never taken
from a save other than the one ``step`` came from.

The replacement is made to happen at exactly that moment: the strategy's storage is wrapped so that
its first ``load`` first commits another save over the path (renamed in, as a writer commits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, torch
    from pathlib import Path
    from fabricx import Fabric
    from fabricx.checkpoint.contents import EntryStorage
    from fabricx.strategies import FSDPStrategy

    root = Path(sys.argv[1])
    fabric = Fabric(accelerator="cpu", devices=1, strategy=FSDPStrategy(timeout=60))
    model = fabric.setup_module(torch.nn.Sequential(torch.nn.Linear(4, 4)))

    def fill(value):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)

    fill(1.0)
    fabric.save(root / "ckpt", {"model": model, "step": 1})
    fill(2.0)
    fabric.save(root / "newer", {"model": model, "step": 2})
    fill(0.0)
    real = fabric.strategy.checkpoint_storage()

    class ReplacedMidLoad(EntryStorage):
        meta_key = real.meta_key
        swapped = 0
        def claims(self, key, obj): return real.claims(key, obj)
        def record(self, entries): return real.record(entries)
        def save(self, staging, entries, filter): return real.save(staging, entries, filter)
        def load(self, loaded, entries, strict):
            if not ReplacedMidLoad.swapped:
                ReplacedMidLoad.swapped = 1
                os.rename(root / "ckpt", root / "ckpt.old")  # another job commits step 2 over the name
                os.rename(root / "newer", root / "ckpt")
            return real.load(loaded, entries, strict)

    fabric.strategy.checkpoint_storage = ReplacedMidLoad
    state = {"model": model, "step": 0}
    fabric.load(root / "ckpt", state)
    weights = sorted({float(v) for p in model.parameters() for v in p.full_tensor().flatten()})
    print(json.dumps({"step": state["step"], "weights": weights, "swapped": ReplacedMidLoad.swapped}))
    """
)


def test_a_save_replacing_the_checkpoint_between_its_files_and_its_shards_gives_one_save(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-4000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["swapped"] == 1  # the replacement did happen in the middle of the load
    # Without the pin on the shards' read, this was step 1 with step 2's weights.
    assert (outcome["step"], outcome["weights"]) == (2, [2.0]), outcome
