"""TPU: one true thing everywhere. fabricx does not train on TPUs, and every place a user looks says so.

`Fabric`, `Trainer` and `fabricx run` refuse `"tpu"` with the registry's one sentence, on any machine (a
machine with TPU cores is faked: none exists here); `"auto"` never picks one; the README, the concepts page,
the accelerator reference, the CLI guide, the migration guide and `fabricx run --help` say the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fabricx import Fabric
from fabricx.accelerators import CPUAccelerator, XLAAccelerator
from fabricx.accelerators.registry import NOT_SUPPORTED
from fabricx.cli import main
from fabricx.train import Trainer
from fabricx.utilities.exceptions import MisconfigurationError

REPO = Path(__file__).resolve().parents[2]
# What a user types; the flag types (fabricx.flags) already leave "tpu" out, so a type checker refuses it too.
TPU: Any = "tpu"
SENTENCE = NOT_SUPPORTED["tpu"]
PAGES = ("README.md", "docs/concepts.md", "docs/reference/accelerators.md", "docs/guides/cli.md",
         "docs/migrating/lightning-fabric.md")


@pytest.fixture(params=["no TPU", "TPU cores present"])
def machine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "TPU cores present":
        monkeypatch.setattr(XLAAccelerator, "is_available", staticmethod(lambda: True))
        monkeypatch.setattr(XLAAccelerator, "auto_device_count", staticmethod(lambda: 8))
    return request.param


def test_the_sentence_is_the_one_the_pages_use() -> None:
    assert SENTENCE == "fabricx does not support TPU training (it has no XLA strategy and is tested on no TPU)"


@pytest.mark.parametrize("given", ["tpu", "an XLAAccelerator"])
def test_fabric_refuses_tpu_on_any_machine(machine: str, given: str) -> None:
    accelerator = TPU if given == "tpu" else XLAAccelerator()
    with pytest.raises(MisconfigurationError, match=re.escape(SENTENCE)) as error:
        Fabric(accelerator=accelerator)
    # What to do instead: the accelerators it does train on.
    assert "'auto', 'cpu', 'cuda', 'gpu', 'mps'" in str(error.value)
    assert "not available on this machine" not in str(error.value)


def test_trainer_refuses_tpu(machine: str, tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=re.escape(SENTENCE)):
        Trainer(accelerator=TPU, default_root_dir=tmp_path, loggers=False)


def test_auto_never_picks_a_tpu(machine: str) -> None:
    assert isinstance(Fabric(accelerator="auto", devices=1).accelerator, CPUAccelerator)


def test_fabricx_run_refuses_tpu_and_its_help_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--accelerator", "tpu", str(script)])
    assert exit_info.value.code == 2
    assert SENTENCE in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps its help lines
    assert "fabricx does not support TPU training: tpu is refused" in help_text, help_text


@pytest.mark.parametrize("page", PAGES)
def test_every_page_says_the_same_thing(page: str) -> None:
    source = (REPO / page).read_text(encoding="utf-8")
    assert "fabricx does not support TPU training" in " ".join(source.split()), page
    # What the pages said before they agreed: TPU picked first by "auto", or "tpu" recognised as a choice.
    for line in (line for line in source.splitlines() if "tpu" in line.lower()):
        for contradiction in (r"picks TPU", r"TPU first", r"recogni[sz]ed", r"cuda, mps, tpu"):
            assert not re.search(contradiction, line, re.IGNORECASE), (page, line)
