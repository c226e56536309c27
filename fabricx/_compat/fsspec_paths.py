"""fsspec's private path normalisation, used when a cached file system serves another URL of its protocol.

Pinned by tests/_compat/test_private_names.py.
"""

from __future__ import annotations

from typing import Any


def strip_protocol(fs: Any, url: str) -> str:
    """``url`` as a path of the fsspec file system ``fs`` (``s3://bucket/key`` -> ``bucket/key``), by the
    file system's own rule (its private ``_strip_protocol``; ``url_to_fs`` applies the same one).

    Example:
        ```python
        strip_protocol(fsspec.filesystem("memory"), "memory://runs/exp1")  # "/runs/exp1"
        ```
    """
    return fs._strip_protocol(url)
