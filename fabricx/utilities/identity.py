"""How fabricx's wrappers keep the user's objects looking like themselves: the one place for it.

Three mechanisms, each used by every wrapper that needs it:

* `facade_class()` — a subclass of *both* a wrapper class and the user's class, so that
  ``isinstance(wrapped, type(user_object))`` holds. One class per (wrapper, user class) pair,
  cached, named like the user's class, and pickled *as the user's class* (a dynamic class cannot
  be found by name when unpickling).
* `Delegating` — attribute access that reads and writes through to the wrapped object, so
  nothing is copied and nothing can go stale: an attribute the user sets on their own object later
  is seen through the wrapper, and one set through the wrapper lands on the user's object.
* `intercept_method()` / `gate_method()` — a method of an existing object (a scheduler's
  ``step``) routed through a handler, or doing nothing while a condition is false. The object keeps
  its class (through a cached facade class) and its ``__dict__`` (so ``state_dict()`` stays the
  user's own).
"""

from __future__ import annotations

import copyreg
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

_FACADES: dict[tuple[type, type, type, str], type] = {}


def _reduce_as(user_cls: type) -> Callable[[Any, int], Any]:
    """``__reduce_ex__`` that pickles an instance of a facade class as an instance of ``user_cls``."""

    def __reduce_ex__(self: Any, protocol: int) -> Any:
        state = self.__getstate__() if hasattr(self, "__getstate__") else dict(self.__dict__)
        return copyreg._reconstructor, (user_cls, object, None), state  # type: ignore[attr-defined]

    return __reduce_ex__


def facade_class(
    wrapper: type | None,
    user_cls: type,
    members: dict[str, Any] | None = None,
    tag: str = "",
    parent: type | None = None,
) -> type:
    """A cached class that subclasses ``wrapper`` (if any) and ``user_cls`` and adds ``members``.

    ``tag`` tells apart facades of the same classes with different ``members`` (members are fixed
    per tag: the first call defines them). ``parent`` (a facade of ``user_cls``) is subclassed
    instead of ``user_cls`` to stack a second facade on a first.

    Example:
        ```python
        cls = facade_class(FabricOptimizer, torch.optim.SGD)
        issubclass(cls, torch.optim.SGD)  # True; cls.__name__ == "SGD"
        ```
    """
    below = parent or user_cls
    key = (wrapper or object, user_cls, below, tag)
    cls = _FACADES.get(key)
    if cls is None:
        bases = (wrapper, below) if wrapper is not None else (below,)
        namespace: dict[str, Any] = dict(members or {})
        namespace["__reduce_ex__"] = _reduce_as(user_cls)
        namespace["__module__"] = user_cls.__module__
        namespace["__qualname__"] = user_cls.__qualname__
        namespace["_fabricx_user_class"] = user_cls
        cls = type(user_cls.__name__, bases, namespace)
        _FACADES[key] = cls
    return cls


def user_class(obj: Any) -> type:
    """The user's own class behind a facade class (``type(obj)`` otherwise)."""
    return getattr(type(obj), "_fabricx_user_class", type(obj))


class Delegating:
    """Reads and writes attributes through to ``self._fabricx_target`` unless the wrapper owns them.

    The wrapper owns the names in its class's ``_OWN`` and every property it defines; everything
    else lives on the wrapped object only.
    """

    _OWN: ClassVar[frozenset[str]] = frozenset()

    def _bind_target(self, target: Any) -> None:
        object.__setattr__(self, "_fabricx_target", target)
        object.__setattr__(self, "_fabricx_unwrapped", target)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the wrapper has no such attribute of its own.
        try:
            target = object.__getattribute__(self, "_fabricx_target")
        except AttributeError:
            raise AttributeError(name) from None
        return getattr(target, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN or isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        else:
            setattr(self._fabricx_target, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__:
            object.__delattr__(self, name)
        else:
            delattr(self._fabricx_target, name)


_HANDLERS: weakref.WeakKeyDictionary[Any, dict[str, Callable[..., Any]]] = weakref.WeakKeyDictionary()


def intercept_method(obj: Any, name: str, handler: Callable[..., Any], tag: str) -> Any:
    """Route ``obj.<name>(*args, **kwargs)`` to ``handler(obj, original, *args, **kwargs)``.

    ``original`` calls the method as it was before (bound to ``obj``). The handler is kept outside
    the object, so its ``__dict__`` and ``state_dict()`` are untouched; ``type(obj)`` becomes a
    cached facade of its class (``isinstance`` holds, pickling gives the user's class back).
    Intercepting the same method with the same ``tag`` again replaces the handler; another tag
    stacks on top.

    Example:
        ```python
        intercept_method(scheduler, "step", lambda s, step, *a, **k: step(*a, **k) if ready() else None, "mine")
        ```
    """
    key = f"{tag}:{name}"
    _HANDLERS.setdefault(obj, {})[key] = handler
    cls = type(obj)
    if key in getattr(cls, "_fabricx_intercepted", ()):
        return obj
    base = user_class(obj)
    inner = getattr(cls, name)

    def intercepted(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _HANDLERS.get(self, {}).get(key)
        if call is None:
            return inner(self, *args, **kwargs)
        return call(self, inner.__get__(self, type(self)), *args, **kwargs)

    intercepted.__name__ = name
    intercepted.__qualname__ = f"{base.__qualname__}.{name}"
    intercepted.__doc__ = getattr(inner, "__doc__", None)
    members = {name: intercepted, "_fabricx_intercepted": (*getattr(cls, "_fabricx_intercepted", ()), key)}
    obj.__class__ = facade_class(None, base, members, tag=key, parent=None if cls is base else cls)
    return obj


def is_intercepted(obj: Any, name: str, tag: str) -> bool:
    """Whether `intercept_method()` routed ``obj.<name>`` with this ``tag``."""
    return f"{tag}:{name}" in getattr(type(obj), "_fabricx_intercepted", ())


def gate_method(obj: Any, name: str, is_open: Callable[[], bool], tag: str) -> Any:
    """Make ``obj.<name>(...)`` do nothing (return ``None``) while ``is_open()`` is false.

    Example:
        ```python
        gate_method(scheduler, "step", lambda: accumulation.sync_gradients, tag="accumulation")
        ```
    """

    def gate(_: Any, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs) if is_open() else None

    return intercept_method(obj, name, gate, tag)


def unwrap(obj: Any) -> Any:
    """The user's own object behind a fabricx wrapper (the object itself otherwise).

    Example:
        ```python
        plain_model = fabricx.unwrap(model)
        ```
    """
    inner = getattr(obj, "_fabricx_unwrapped", None)
    return inner if inner is not None else obj


def is_wrapped(obj: Any) -> bool:
    return getattr(obj, "_fabricx_unwrapped", None) is not None
