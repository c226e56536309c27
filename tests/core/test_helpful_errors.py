"""Errors a newcomer meets in the first hour say what was given and what to do.

A mistyped keyword gets Python's own TypeError with the closest name suggested; a loss of several elements
gets a message naming its shape and how to reduce it; a missing optional package names the extra that
installs it from the package index.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fabricx import Fabric
from fabricx.cli import main
from fabricx.train import Trainer
from fabricx.utilities.imports import require

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("build", "given", "meant"),
    [(Trainer, "max_epoch", "max_epochs"), (Trainer, "gradient_clip_value", "gradient_clip_val"),
     (Fabric, "device", "devices"), (Fabric, "precission", "precision")],
)
def test_a_mistyped_keyword_suggests_the_accepted_one(build, given, meant) -> None:
    with pytest.raises(TypeError) as raised:
        build(**{given: 1})
    assert str(raised.value) == (
        f"{build.__name__}.__init__() got an unexpected keyword argument '{given}'. Did you mean '{meant}'?"
    )


def test_an_unknown_keyword_with_no_close_name_lists_the_accepted_ones() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzzz'\. The accepted keywords are: "
                                        r"accelerator, strategy, devices, .*precision"):
        Fabric(zzzz=1)


def test_backward_of_a_loss_with_several_elements_says_how_to_reduce_it() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup(torch.nn.Linear(3, 2))
    with pytest.raises(RuntimeError) as raised:
        fabric.backward(model(torch.randn(4, 3)))  # torch: "grad can be implicitly created only for scalar outputs"
    message = str(raised.value)
    assert "shape (4, 2) (8 elements)" in message and "fabric.backward(loss.mean())" in message, message
    assert "scalar outputs" in str(raised.value.__cause__)
    output = model(torch.randn(4, 3))
    fabric.backward(output, torch.ones_like(output))  # a gradient given: torch's own semantics
    assert model.weight.grad is not None


def test_plot_without_matplotlib_names_the_extra_on_the_package_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "metrics.csv").write_text("epoch,step,train_loss\n0,0,2.5\n0,1,2.0\n")
    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert main(["plot", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert 'pip install "fabricx[plot]"' in error and "`matplotlib`" in error, error


def test_require_names_the_package_to_install() -> None:
    expected = r'needs the `scikit-learn` package.*pip install "fabricx\[examples\]"'
    with pytest.raises(ModuleNotFoundError, match=expected):
        require("no_such_module_for_fabricx.datasets", extra="examples", feature="a test", package="scikit-learn")


def test_the_digits_examples_without_scikit_learn_name_the_examples_extra(tmp_path: Path) -> None:
    # Both examples in one process, scikit-learn hidden as if it were not installed.
    script = (
        "import runpy, sys\n"
        "sys.modules['sklearn'] = None\n"
        "for example in ('convert_loop.py', 'digits_trainer.py'):\n"
        "    sys.argv = [example, '--accelerator', 'cpu']\n"
        "    try:\n"
        "        runpy.run_path(f'examples/{example}', run_name='__main__')\n"
        "    except ModuleNotFoundError as error:\n"
        "        print(f'{example}: {error}')\n"
    )
    (tmp_path / "examples").symlink_to(REPO / "examples")  # whatever a run would write stays in tmp_path
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    process = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=240)
    lines = [line for line in process.stdout.splitlines() if line.startswith(("convert_loop.py:", "digits_trainer"))]
    assert len(lines) == 2, process.stdout[-2000:] + process.stderr[-3000:]
    for line in lines:
        assert "scikit-learn" in line and 'pip install "fabricx[examples]"' in line, line
