"""How many of ``Fabric``'s public signatures are typed ``Any``: at most six.

The rule the count applies:

* A public member is every method, static method and property of ``fabricx.Fabric`` whose name does
  not start with ``_``, plus ``__init__`` (the constructor's flags are public API).
* A member counts once if ``Any`` stands at the top level of any of its annotations: a parameter
  (``*args``/``**kwargs`` included) or the return is ``Any`` itself, or a union with ``Any`` as one of
  its members (``Any | None``). ``Any`` inside a container or a callable type (``dict[str, Any]``,
  ``Callable[..., Any]``) does not count: the caller still knows the outer type.
* An overloaded method is judged by its overloads (what a type checker shows the caller), not by the
  implementation behind them.

Names imported only under ``TYPE_CHECKING`` in ``fabricx/fabric.py`` are imported here to resolve the
annotations, so a signature that names a missing type fails this test instead of being skipped.
"""

from __future__ import annotations

import ast
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path

import fabricx.fabric
from fabricx import Fabric

ALLOWED = 6


def _type_checking_namespace() -> dict[str, object]:
    """``fabricx.fabric``'s globals plus what its ``if TYPE_CHECKING:`` block imports."""
    namespace = dict(vars(fabricx.fabric))
    tree = ast.parse(Path(fabricx.fabric.__file__).read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            exec(compile(ast.Module(body=node.body, type_ignores=[]), "<TYPE_CHECKING>", "exec"), namespace)
    return namespace


def _public_members() -> dict[str, list[Callable[..., object]]]:
    """Each public member's signatures: the overloads if there are any, else the function itself."""
    members: dict[str, list[Callable[..., object]]] = {}
    for name, raw in vars(Fabric).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(raw, property):
            function = raw.fget
        elif isinstance(raw, staticmethod | classmethod):
            function = raw.__func__
        elif inspect.isfunction(raw):
            function = raw
        else:
            continue
        assert function is not None
        members[name] = list(typing.get_overloads(function)) or [function]
    return members


def _is_top_level_any(annotation: object) -> bool:
    if annotation is typing.Any:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(arg is typing.Any for arg in typing.get_args(annotation))
    return False


def _any_annotations(function: Callable[..., object], namespace: dict[str, object]) -> list[str]:
    hints = typing.get_type_hints(function, globalns=namespace)
    return [name for name, annotation in hints.items() if _is_top_level_any(annotation)]


def test_at_most_six_public_signatures_of_fabric_use_any():
    namespace = _type_checking_namespace()
    members = _public_members()
    offenders = {}
    for name, signatures in members.items():
        where = sorted({hit for function in signatures for hit in _any_annotations(function, namespace)})
        if where:
            offenders[name] = where
    listing = "\n".join(f"  {name}: {', '.join(where)}" for name, where in sorted(offenders.items()))
    assert len(offenders) <= ALLOWED, (
        f"{len(offenders)} of Fabric's {len(members)} public signatures use a top-level Any "
        f"(at most {ALLOWED} allowed):\n{listing}"
    )


def test_the_count_sees_any_where_it_stands():
    # The rule itself: a top-level Any counts, a nested one does not, overloads are what is judged.
    def plain(x: int, *args: typing.Any) -> None: ...

    def optional(x: typing.Any | None) -> None: ...

    def nested(x: dict[str, typing.Any]) -> list[typing.Any]: ...

    namespace = {"typing": typing}
    assert _any_annotations(plain, namespace) == ["args"]
    assert _any_annotations(optional, namespace) == ["x"]
    assert _any_annotations(nested, namespace) == []
    members = _public_members()
    assert len(members["setup"]) > 1, "setup() is judged by its overloads"
    assert "__init__" in members and "device" in members and "seed_everything" in members
