"""fabricx's modules import each other without circles (issue 24): read from the source, so lazy imports
inside functions and ``if TYPE_CHECKING:`` imports count as edges too. The one allowance is what Lightning's
public API forces: a type-only import of the `Trainer` (`train/trainer.py`) from inside `fabricx/train/`.
Callback hooks take ``trainer: Trainer`` and the Trainer builds its own callbacks and loops, so the Trainer's type
and the modules that name it form a circle; typing the hooks with a protocol instead would make a user's
``def on_train_start(self, trainer: Trainer, ...)`` override an error in their type checker. Every other module
imports without a circle, type-only imports counted (issue 41), the `TrainModule`'s too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fabricx"



def _absolute_module(node: ast.ImportFrom, base: str) -> str:
    """The module a `from ... import` names, relative imports resolved against the package `base`."""
    module = node.module or ""
    if node.level:
        anchor = base
        for _ in range(node.level - 1):
            anchor = anchor.rpartition(".")[0]
        module = f"{anchor}.{module}" if module else anchor
    return module

def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for file in PACKAGE.rglob("*.py"):
        parts = list(file.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (file, is_package)
    return found


def _type_only_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the statements inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
    return lines


def _edges(modules: dict[str, tuple[Path, bool]]) -> dict[str, dict[str, bool]]:
    """module -> {imported module: whether every import of it is type-only}."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, bool]] = {}
    for name, (file, is_package) in modules.items():
        tree = ast.parse(file.read_text())
        type_only = _type_only_lines(tree)
        base = name if is_package else name.rpartition(".")[0]
        out: dict[str, bool] = {}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = _absolute_module(node, base)
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module for alias in node.names
                ]
            for target in targets:
                if not target.startswith("fabricx"):
                    continue
                resolved = resolve(target)
                if resolved is None or resolved == name:
                    continue
                out[resolved] = out.get(resolved, True) and node.lineno in type_only
        edges[name] = out
    return edges


def _circles(edges: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _allowed(edges: dict[str, dict[str, bool]], source: str, target: str) -> bool:
    return source.startswith("fabricx.train") and target == "fabricx.train.trainer" and edges[source][target]


def test_no_import_circle_but_type_only_imports_of_the_trainer() -> None:
    edges = _edges(_modules())
    kept = {
        source: {t: o for t, o in targets.items() if not _allowed(edges, source, t)}
        for source, targets in edges.items()
    }
    circles = _circles(kept)
    detail = [{member: sorted(set(kept[member]) & set(circle)) for member in circle} for circle in circles]
    assert not circles, detail


def test_no_circle_between_packages_at_run_time() -> None:
    # Issue 41: one package's modules may import another's only one way round (lazy imports inside functions
    # count; type-only imports do not). `_compat` imports nothing of fabricx's, `wrappers/` nothing of
    # `strategies/`' at run time.
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    between: dict[str, dict[str, bool]] = {}
    for source, targets in _edges(_modules()).items():
        for target, type_only in targets.items():
            if not type_only and package(source) != package(target):
                between.setdefault(package(source), {})[package(target)] = False
                between.setdefault(package(target), {})
    assert _circles(between) == []


def test_the_check_sees_a_circle() -> None:
    edges = {"fabricx.a": {"fabricx.b": True}, "fabricx.b": {"fabricx.c": False}, "fabricx.c": {"fabricx.a": False}}
    assert _circles(edges) == [["fabricx.a", "fabricx.b", "fabricx.c"]]
    # type-only edges count, but for those into the Trainer's module from train/
    edges = {"fabricx.train.a": {"fabricx.train.b": True}, "fabricx.train.b": {"fabricx.train.a": True}}
    kept = {s: {t: o for t, o in ts.items() if not _allowed(edges, s, t)} for s, ts in edges.items()}
    assert _circles(kept) == [["fabricx.train.a", "fabricx.train.b"]]
    edges = {"fabricx.train.a": {"fabricx.train.trainer": True}, "fabricx.train.trainer": {"fabricx.train.a": False}}
    kept = {s: {t: o for t, o in ts.items() if not _allowed(edges, s, t)} for s, ts in edges.items()}
    assert _circles(kept) == []


def test_the_checkpointer_imports_no_layout_backend_strategy_or_facade() -> None:
    """A layout is looked up by its key, so the checkpointer (and the registry it asks) names no backend:
    a new layout is one backend file plus one registry line."""
    edges = _edges(_modules())
    backends = sorted(m for m in edges if m.startswith("fabricx.checkpoint.layouts."))
    assert {"fabricx.checkpoint.layouts.directory", "fabricx.checkpoint.layouts.single_file"} <= set(backends)

    def forbidden(name: str) -> bool:
        return (
            name in backends
            or name == "fabricx.fabric"
            or name.startswith(("fabricx.strategies", "fabricx.connector"))
        )

    for module in ("fabricx.checkpoint.checkpointer", "fabricx.checkpoint.layouts"):
        imported = sorted(edges[module])
        assert not [name for name in imported if forbidden(name)], f"{module} imports {imported}"
    assert "fabricx.checkpoint.layouts" in edges["fabricx.checkpoint.checkpointer"]  # the registry, by key


def test_no_module_imports_another_modules_underscore_names() -> None:
    """``from fabricx.x import _y`` reaches into another module's privates; make ``y`` public there instead.
    (``fabricx._compat`` is the package of shims, whose module names start with ``_`` by design.)"""
    modules = _modules()
    found = []
    for name, (file, is_package) in modules.items():
        base = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(file.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = _absolute_module(node, base)
            if not module.startswith("fabricx") or module == name:
                continue
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            found += [f"{name}:{node.lineno} imports {module}.{attr}" for attr in private]
    assert not found, found
