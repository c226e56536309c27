"""The ``Literal`` flag types are generated from the registries and stay in step with them."""

from __future__ import annotations

import typing

from fabricx import flags as _flags
from fabricx.accelerators.registry import ACCELERATORS
from fabricx.precision.registry import ALIASES
from fabricx.strategies.registry import STRATEGIES
from tools.gen_flags import TARGET, render


def test_flags_file_is_up_to_date_with_the_registries():
    assert TARGET.read_text() == render(), "run `python -m tools.gen_flags` and commit fabricx/flags.py"


def test_every_registry_name_is_a_literal_value():
    assert set(typing.get_args(_flags.AcceleratorName)) == {"auto", *ACCELERATORS}
    assert set(typing.get_args(_flags.StrategyName)) == {"auto", *STRATEGIES}
    precisions = set(typing.get_args(_flags.PrecisionName))
    assert set(ALIASES) <= precisions and {16, 32, 64} <= precisions
