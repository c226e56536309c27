"""The shape `fabricx/train/` keeps so that a newcomer can change it: small files, the Trainer's private state
read only by the Trainer's own module, a short `Trainer.__init__` (the flags are checked by `TrainerConfig`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fabricx.train

TRAIN = Path(fabricx.train.__file__).parent
MAX_LINES = 700
MAX_INIT_LINES = 60
# `trainer._x`, `self.trainer._x`, `self._trainer._x`: a private attribute of a Trainer read from outside.
PRIVATE_TRAINER_ACCESS = re.compile(r"trainer\._[a-z]")


def _sources() -> list[Path]:
    return sorted(TRAIN.rglob("*.py"))


def test_no_file_in_train_is_longer_than_700_lines() -> None:
    long = {str(p.relative_to(TRAIN)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_only_the_trainer_module_reads_private_trainer_attributes() -> None:
    found = []
    for path in _sources():
        if path.name == "trainer.py" and path.parent == TRAIN:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_TRAINER_ACCESS.search(line):
                found.append(f"{path.relative_to(TRAIN)}:{number}: {line.strip()}")
    assert found == []


def test_trainer_init_is_at_most_60_lines() -> None:
    tree = ast.parse((TRAIN / "trainer.py").read_text())
    trainer = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Trainer")
    init = next(node for node in trainer.body if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    assert init.end_lineno is not None
    first = min([init.lineno, *(decorator.lineno for decorator in init.decorator_list)])
    assert init.end_lineno - first + 1 <= MAX_INIT_LINES
