"""Precision flag values, their aliases, and the plugin each one builds."""

from __future__ import annotations

from fabricx.precision.amp import MixedPrecision
from fabricx.precision.precision import Precision
from fabricx.precision.true_dtype import DoublePrecision, HalfPrecision
from fabricx.utilities.exceptions import MisconfigurationError

PRECISIONS: tuple[str, ...] = ("32-true", "64-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")
ALIASES: dict[str, str] = {
    "32": "32-true",
    "64": "64-true",
    "16": "16-mixed",
    "bf16": "bf16-mixed",
    "32-true": "32-true",
    "64-true": "64-true",
    "16-mixed": "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
}


def normalize_precision(value: str | int | None) -> str:
    """Map a ``precision=`` flag (with aliases such as ``16`` or ``"bf16"``) to its canonical name."""
    if value is None:
        return "32-true"
    key = str(value)
    if key not in ALIASES:
        raise MisconfigurationError(
            f"precision={value!r} is not supported. Choose one of {list(PRECISIONS)} "
            f"(or the aliases 32, 64, 16, 'bf16')."
        )
    return ALIASES[key]


def build_precision(name: str, device_type: str) -> Precision:
    """The plugin for a canonical precision name on a device type (``"cpu"``, ``"cuda"``, ...)."""
    if name == "32-true":
        return Precision()
    if name == "64-true":
        return DoublePrecision()
    if name in ("16-true", "bf16-true"):
        return HalfPrecision(name)
    return MixedPrecision(name, device="cuda" if device_type == "cuda" else device_type)
