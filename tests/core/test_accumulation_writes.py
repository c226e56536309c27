"""`AccumulationState` changes only through its own transitions (issue 41): read from the source, no module
outside ``fabricx/accumulation/`` assigns one of its fields (``x.counter = ...``, ``x.sync_gradients += ...``,
``setattr(x, "in_window", ...)``).

The fields are the class's ``__slots__``, read from its source, so a new field is covered without touching this
test. A class writing a field of the same name on itself (``self.sync_gradients = ...`` in Accelerate's
``GradientState``) is that class's own business and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fabricx"
OWNER = PACKAGE / "accumulation"


def _fields() -> set[str]:
    """The ``__slots__`` of ``AccumulationState`` (each also without its leading underscore: the property)."""
    tree = ast.parse((OWNER / "state.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AccumulationState":
            for statement in node.body:
                if isinstance(statement, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in statement.targets
                ):
                    slots = ast.literal_eval(statement.value)
                    return set(slots) | {slot.lstrip("_") for slot in slots}
    raise AssertionError("AccumulationState and its __slots__ are no longer in fabricx/accumulation/state.py")


def _writes(tree: ast.Module, fields: set[str]) -> list[tuple[int, str]]:
    """(line, target) of every assignment to an attribute named like a field, except a class's own ``self.x``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, own_class: str | None) -> None:
        if isinstance(node, ast.ClassDef):
            own_class = node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in _flatten(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in fields
        ):
            found.append((node.lineno, ast.unparse(node)))
        for target in targets:
            if not isinstance(target, ast.Attribute) or target.attr not in fields:
                continue
            writes_itself = (
                isinstance(target.value, ast.Name) and target.value.id == "self" and own_class != "AccumulationState"
            )
            if not writes_itself:
                found.append((target.lineno, ast.unparse(target)))
        for child in ast.iter_child_nodes(node):
            visit(child, own_class)

    visit(tree, None)
    return found


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [t for element in target.elts for t in _flatten(element)]
    return [target]


def test_the_scan_sees_a_write_in_each_form() -> None:
    """The scan itself can fail: each way of writing a field is found, a class's own field is not."""
    source = (
        "acc.counter = 0\n"
        "acc.counter += 1\n"
        "x, acc.in_window = 1, True\n"
        "setattr(acc, 'window_length', 3)\n"
        "fabric.accumulation_state.active_loader = loader\n"
        "class GradientState:\n"
        "    def __init__(self):\n"
        "        self.sync_gradients = True\n"
    )
    lines = [line for line, _ in _writes(ast.parse(source), _fields())]
    assert lines == [1, 2, 3, 4, 5]


def test_accumulation_state_is_written_only_inside_the_accumulation_package() -> None:
    fields = _fields()
    outside = []
    for file in sorted(PACKAGE.rglob("*.py")):
        if OWNER in file.parents:
            continue
        for line, target in _writes(ast.parse(file.read_text()), fields):
            outside.append(f"{file.relative_to(PACKAGE.parent)}:{line}: {target}")
    assert not outside, (
        "AccumulationState fields are written outside fabricx/accumulation/; call one of its transitions "
        "(begin/end/restore/reset/set_active_loader) instead:\n" + "\n".join(outside)
    )
