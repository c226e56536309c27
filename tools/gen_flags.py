"""Write ``fabricx/flags.py``: the ``Literal`` types of ``Fabric``'s flags, from the registries.

Run ``python -m tools.gen_flags`` after adding a registry name; tests/core/test_flag_types.py
fails while the file is out of date.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGET = Path(__file__).resolve().parents[1] / "fabricx" / "flags.py"


def _literal(name: str, values: list[str], extra: str = "") -> str:
    body = "\n".join(f"    {json.dumps(value)}," for value in values)
    return f"{name} = Literal[\n{body}\n{extra}]\n"


def render() -> str:
    """The text of ``fabricx/flags.py`` for the registries as they are now."""
    from fabricx.accelerators.registry import ACCELERATORS
    from fabricx.precision.registry import ALIASES
    from fabricx.strategies.registry import STRATEGIES

    accelerators = ["auto", *ACCELERATORS]
    strategies = ["auto", *STRATEGIES]
    precisions = list(ALIASES)
    numbers = ", ".join(sorted({name for name in ALIASES if name.isdigit()}, key=int))
    return (
        '"""The names ``Fabric(accelerator=, strategy=, precision=)`` accept, as ``Literal`` types.\n\n'
        "Generated from the registries by ``python -m tools.gen_flags``; do not edit by hand.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from typing import Literal\n\n"
        + _literal("AcceleratorName", accelerators)
        + "\n"
        + _literal("StrategyName", strategies)
        + "\n"
        + _literal("PrecisionName", precisions, extra=f"    {numbers},\n")
    )


def main() -> None:
    TARGET.write_text(render())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
