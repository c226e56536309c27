"""``Any`` in at most six of ``Fabric``'s public method signatures, counted the plain way.

The rule (stricter than `test_fabric_signatures.py`, which judges overloads and only a top-level ``Any``): every
public method of ``Fabric`` (``inspect.getmembers``, a name without a leading ``_``, callable, so properties are
not counted) counts once if ``Any`` appears anywhere in ``str(inspect.signature(method))``: a nested
``dict[str, Any]`` and ``Callable[..., Any]`` count too, and an overloaded method is judged by its
implementation, the signature ``inspect``, ``help()`` and the API pages show.

What may keep ``Any`` (as Lightning Fabric's own signatures do): the pass-through ``*args``/``**kwargs`` of
``backward`` and ``print``, and the checkpoint contents of ``save``, ``load``, ``save_checkpoint`` and
``load_latest`` (``dict[str, Any]``: a dict's value type is invariant, so ``dict[str, object]`` would refuse
a user's ``{"model": model}``, and ``load`` puts values of any type back into it).
"""

from __future__ import annotations

import inspect

from fabricx import Fabric

ALLOWED = 6


def methods_with_any(cls: type) -> tuple[dict[str, str], int]:
    """Public method name -> signature for those whose signature mentions ``Any``; and how many were seen."""
    found = {}
    seen = 0
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or not callable(member):
            continue
        try:
            signature = str(inspect.signature(member))
        except (TypeError, ValueError):
            continue
        seen += 1
        if "Any" in signature:
            found[name] = signature
    return found, seen


def test_at_most_six_public_methods_of_fabric_mention_any():
    found, seen = methods_with_any(Fabric)
    assert seen >= 30, f"only {seen} public methods seen; the count no longer looks at Fabric's API"
    listing = "\n".join(f"  {name}{signature}" for name, signature in sorted(found.items()))
    assert len(found) <= ALLOWED, (
        f"{len(found)} of Fabric's {seen} public methods mention Any (at most {ALLOWED}):\n{listing}"
    )


def test_the_count_sees_a_nested_any_and_an_implementation_behind_overloads():
    from typing import Any, overload

    class Sample:
        def plain(self, x: int) -> int: ...

        def nested(self, state: dict[str, Any]) -> None: ...

        @overload
        def over(self, x: int) -> int: ...

        @overload
        def over(self, x: str) -> str: ...

        def over(self, x: Any) -> Any: ...

        @property
        def prop(self) -> Any: ...

        def _private(self) -> Any: ...

    found, seen = methods_with_any(Sample)
    assert sorted(found) == ["nested", "over"]
    assert seen == 3
