"""Small helpers shared by every layer of fabricx.

The rank-zero helpers and the throughput tools (``Throughput``, ``ThroughputMonitor``, ``measure_flops``,
``get_available_flops``) are reachable from the package, and every module of it as an attribute
(``fabricx.utilities.types``), as in ``lightning.fabric.utilities``.

Example:
    ```python
    import fabricx

    fabricx.utilities.rank_zero_warn("only the first process warns")
    ```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_print, rank_zero_warn
    from fabricx.utilities.throughput import Throughput, ThroughputMonitor, get_available_flops, measure_flops

_RANK_ZERO = ("rank_zero_info", "rank_zero_only", "rank_zero_print", "rank_zero_warn")
_THROUGHPUT = ("Throughput", "ThroughputMonitor", "get_available_flops", "measure_flops")


def __getattr__(name: str) -> Any:
    # Loaded on first use: importing one helper module must not import the others.
    if name in _RANK_ZERO:
        from fabricx.utilities import rank_zero

        return getattr(rank_zero, name)
    if name in _THROUGHPUT:
        from fabricx.utilities import throughput

        return getattr(throughput, name)
    from fabricx.utilities.imports import submodule

    module = submodule(__name__, name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return module


__all__ = [
    "Throughput",
    "ThroughputMonitor",
    "get_available_flops",
    "measure_flops",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_print",
    "rank_zero_warn",
]
