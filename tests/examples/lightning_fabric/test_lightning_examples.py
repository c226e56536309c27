"""Lightning's own ``examples/fabric`` scripts, run unchanged through Lightning Fabric and through fabricx.

Each script is Lightning's file as shipped (``image_classifier_train_fabric.py`` is
``examples/fabric/image_classifier/train_fabric.py``). The fabricx run changes only the import
(``lightning.fabric`` becomes ``fabricx``); downloads are replaced by synthetic stand-ins
(``stand_ins/``). Both runs must print the same numbers: every training loss and test result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[2]
_NUMBERS = re.compile(r"Loss: [0-9.]+|Average loss: [0-9.]+|Accuracy: \([0-9]+%\)")


def _script_for(framework: str, source: Path, tmp_path: Path) -> Path:
    text = source.read_text()
    if framework == "fabricx":
        text = text.replace("from lightning.fabric import", "from fabricx import")
        assert not re.search(r"^\s*(from|import) lightning", text, re.M), "the script still imports lightning"
    target = tmp_path / framework / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def _run(framework: str, source: Path, tmp_path: Path, devices: int, args: list[str]) -> list[str]:
    script = _script_for(framework, source, tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE / "stand_ins"), str(REPO), env.get("PYTHONPATH", "")])
    env.update(OMP_NUM_THREADS="1", FABRICX_STANDIN_MNIST_SIZE="192", MASTER_ADDR="127.0.0.1")
    if devices == 1:
        command = [sys.executable, str(script), *args]
    elif framework == "lightning":
        cli = Path(sys.executable).with_name("fabric")
        command = [str(cli), "run", "--accelerator=cpu", f"--devices={devices}", str(script), *args]
    else:
        launcher = [sys.executable, "-m", "fabricx", "run", "--accelerator=cpu", f"--devices={devices}"]
        command = [*launcher, str(script), *args]
    done = subprocess.run(command, env=env, cwd=script.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{framework} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    numbers = _NUMBERS.findall(done.stdout)
    assert numbers, f"{framework} printed no results:\n{done.stdout[-2000:]}"
    return sorted(numbers)  # ranks print in any order


_IMAGE_CLASSIFIER = ["--epochs=2", "--batch-size=32", "--log-interval=2", "--lr=0.5"]


@pytest.mark.parametrize(
    "devices", [1, pytest.param(2, marks=[pytest.mark.slow, pytest.mark.distributed])], ids=["1p", "2p-ddp"]
)
def test_image_classifier_prints_the_numbers_lightning_prints(tmp_path, devices):
    source = HERE / "image_classifier_train_fabric.py"
    lightning = _run("lightning", source, tmp_path, devices, _IMAGE_CLASSIFIER)
    fabricx = _run("fabricx", source, tmp_path, devices, _IMAGE_CLASSIFIER)
    assert fabricx == lightning
