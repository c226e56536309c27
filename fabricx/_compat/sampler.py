"""torch's private record of whether a ``RandomSampler`` was given ``num_samples``.

``RandomSampler.num_samples`` (public) answers ``len(dataset)`` when none was given, so it cannot tell
"draw a permutation of the dataset" from "draw exactly N samples"; the private ``_num_samples`` is
``None`` only in the first case. It is read here only.
"""

from __future__ import annotations

from typing import Any

NUM_SAMPLES_ATTRIBUTE = "_num_samples"


def given_num_samples(sampler: Any) -> int | None:
    """The ``num_samples`` a ``RandomSampler`` was constructed with (``None`` when none was given).

    Example:
        ```python
        given_num_samples(RandomSampler(range(4), num_samples=2))  # 2
        ```
    """
    return getattr(sampler, NUM_SAMPLES_ATTRIBUTE)


def draws_a_permutation(sampler: Any) -> bool:
    """Whether a ``RandomSampler`` draws each index exactly once (no replacement, no ``num_samples``).

    Example:
        ```python
        draws_a_permutation(RandomSampler(range(4)))  # True
        ```
    """
    return not sampler.replacement and given_num_samples(sampler) is None
