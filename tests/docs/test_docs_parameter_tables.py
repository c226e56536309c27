"""The parameter tables of the API pages agree with the signatures: a default where there is one, real types.

A docstring line documenting several parameters at once (`a, b: ...`) reaches the table as one unknown
parameter with no type and the default "required" (the Trainer's `limit_*_batches` once did); a type the
signature gives must show as that type, not as `Any`.
"""

from __future__ import annotations

import html
import importlib
import inspect
import re
from pathlib import Path

import pytest

# (page, the documented class), the tables a newcomer reads first and the ones that once had joined lines.
TABLES = (
    ("reference/train/index.html", "fabricx.train.trainer.Trainer"),
    ("reference/fabric/index.html", "fabricx.fabric.Fabric"),
    ("reference/strategies/index.html", "fabricx.strategies.deepspeed.strategy.DeepSpeedStrategy"),
    ("reference/accelerate/index.html", "fabricx.compat.accelerate.accelerator.Accelerator"),
)


def _cell_text(cell: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).split())


def parameter_rows(page: str, anchor: str) -> dict[str, tuple[str, str]]:
    """Name -> (type, default) from the first "Parameters" table after the object's heading."""
    start = page.find(f'id="{anchor}"')
    assert start >= 0, f"no heading {anchor} on the page"
    table = re.search(r"<table>(.*?)</table>", page[start:], re.DOTALL)
    assert table is not None, f"no table after {anchor}"
    rows = re.findall(r"<tr.*?</tr>", table.group(1), re.DOTALL)
    header = [_cell_text(cell) for cell in re.findall(r"<th.*?</th>", rows[0], re.DOTALL)]
    assert header == ["Name", "Type", "Description", "Default"], header
    found = {}
    for row in rows[1:]:
        name, type_, _, default = (_cell_text(cell) for cell in re.findall(r"<td.*?</td>", row, re.DOTALL))
        found[name] = (type_, default)
    return found


def disagreements(rows: dict[str, tuple[str, str]], signature: inspect.Signature) -> list[str]:
    """What the table says that the signature does not."""
    wrong = []
    for name, (type_, default) in rows.items():
        parameter = signature.parameters.get(name.lstrip("*"))
        if parameter is None:
            wrong.append(f"{name}: not a parameter of the signature (several names on one docstring line?)")
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        has_default = parameter.default is not parameter.empty
        if has_default and default == "required":
            wrong.append(f"{name}: shown as required, but defaults to {parameter.default!r}")
        annotation = parameter.annotation
        if annotation is not parameter.empty and annotation not in ("Any", "typing.Any") and type_ in ("", "Any"):
            wrong.append(f"{name}: shown as {type_ or 'untyped'}, but the signature says {annotation}")
    return wrong


def _signature(path: str) -> inspect.Signature:
    module, name = path.rsplit(".", 1)
    return inspect.signature(getattr(importlib.import_module(module), name).__init__)


@pytest.mark.parametrize(("page", "anchor"), TABLES, ids=[anchor.rsplit(".", 1)[1] for _, anchor in TABLES])
def test_parameter_table_agrees_with_the_signature(site: Path, page: str, anchor: str) -> None:
    rows = parameter_rows((site / page).read_text(encoding="utf-8"), anchor)
    assert len(rows) >= 5, f"{anchor}: only {sorted(rows)} in its table; the parser may have read the wrong one"
    assert not (wrong := disagreements(rows, _signature(anchor))), f"{anchor}:\n  " + "\n  ".join(wrong)


def test_a_joined_line_and_a_lost_type_are_caught() -> None:
    def init(self, limit_train_batches: int | float | None = None, seed: int | None = None) -> None: ...

    rows = {"limit_train_batches, limit_val_batches": ("", "required"), "seed": ("Any", "None")}
    assert disagreements(rows, inspect.signature(init)) == [
        "limit_train_batches, limit_val_batches: not a parameter of the signature (several names on one docstring "
        "line?)",
        "seed: shown as Any, but the signature says int | None",
    ]
