"""The clients' cases that pass on Lightning and not on fabricx: client folder -> {pytest node id: reason}.

Each one runs as a strict xfail under fabricx (an unexpected pass fails), and each reason that is a deliberate
difference is a row of docs/migrating/lightning-trainer.md.
"""

from __future__ import annotations

KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {}
