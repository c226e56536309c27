"""One save as a layout receives it: who saves, where, what, with which filter and in which mode.

`fabricx.checkpoint.layouts.Layout.save` takes one `SaveRequest`, so the extension point can grow a field
without breaking the layouts written for it. It is exported from `fabricx.checkpoint.layouts`; it lives
here so that a layout backend, which imports no module of ``layouts/``, can name it too.

Example:

```python
request = SaveRequest(fabric.strategy, "ckpt", {"model": model}, None, save_mode("sync"))
LAYOUT.save(request)
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.contents import claimed_entries, split_state

if TYPE_CHECKING:
    from fabricx.checkpoint.contents import EntryStorage
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.save_modes import SaveMode

__all__ = ["SaveRequest"]


@dataclass(frozen=True)
class SaveRequest:
    """Every rank's call of one save: write ``state`` (filtered by ``filter``) at ``path`` for ``host``,
    synchronously or in the background as ``mode`` says."""

    host: CheckpointHost
    path: str
    state: dict[str, Any]
    filter: Mapping[str, Callable] | None
    mode: SaveMode

    def claimed_by(self, storage: EntryStorage | None) -> dict[str, Any]:
        """The entries ``storage`` writes itself, once it has checked that it can apply the filter to them."""
        claimed = claimed_entries(storage, self.state)
        if claimed and storage is not None:
            storage.check_filter(list(claimed), dict(self.filter) if self.filter else None)
        return claimed

    def split(self, entries: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``entries`` of the state as (shared, per-rank) contents, filtered."""
        return split_state(self.host, entries, self.filter)
