"""`fabricx/train/` is grouped by concern, as Lightning's ``trainer/connectors/``, ``loops/`` and ``core/`` are
(issue 41): the Trainer and the few modules every part reads stay at the top, the rest lives in a sub-package a
newcomer finds by its name."""

from __future__ import annotations

from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "fabricx" / "train"
MAX_TOP_LEVEL_MODULES = 12
CONCERNS = {"callbacks", "config", "data", "logging", "loops", "module", "optim", "tuner"}


def test_train_top_level_holds_at_most_12_modules() -> None:
    modules = sorted(path.name for path in TRAIN.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def test_train_has_a_sub_package_per_concern() -> None:
    packages = {path.parent.name for path in TRAIN.glob("*/__init__.py")}
    assert packages >= CONCERNS, sorted(CONCERNS - packages)

