"""Left-overs of killed saves on object stores, removed by later saves into the same parent prefix.

A save killed during the first save of ``<parent>/<name>`` leaves ``<name>/v-<token>/...`` without a
``COMMIT`` marker, and a killed re-save leaves a version its marker does not name. Object stores have no
locks, so a version counts as dead only when no save of this process is writing it and its newest object
is older than ``stale_after`` by the store's own clock. Each commit examines a few names after the previous
ones (wrapping around), so the cost per save stays the same however many names the parent holds.

Example:

```python
names = next_names(fs, "bucket/run", after="step_100", limit=4)
remove_stale_versions(fs, "bucket/run/step_7", cutoff=marker_time - 3600, busy=set(), read_marker=read)
```
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Collection
from pathlib import PurePosixPath
from typing import Any

__all__ = ["COMMIT_MARKER", "VERSION_NAME", "modified", "next_names", "remove_stale_versions"]

#: The object naming a checkpoint's committed version; written after every file of that version.
COMMIT_MARKER = "COMMIT"
#: The name of one save's version prefix.
VERSION_NAME = re.compile(r"^v-[A-Za-z0-9_-]{1,64}$")
_MTIME_KEYS = ("LastModified", "mtime", "created", "updated", "last_modified")


def modified(info: dict[str, Any]) -> float | None:
    """The store's time (POSIX seconds) an object was last written, from its ``fs.info``/``find`` entry;
    ``None`` when the store does not say (such objects are never taken for stale)."""
    for key in _MTIME_KEYS:
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def next_names(fs: Any, parent: str, *, after: str, limit: int) -> list[str]:
    """At most ``limit`` folder names directly in ``parent`` that follow ``after`` in name order, wrapping
    around to the first names; on S3 by at most two listing requests of ``limit`` entries each."""
    if callable(getattr(fs, "call_s3", None)) and callable(getattr(fs, "split_path", None)):
        names = _s3_names(fs, parent, after, limit)
        if len(names) < limit and after:
            names += [n for n in _s3_names(fs, parent, "", limit) if n < after and n not in names]
        return names[:limit]
    try:  # other stores: one listing (local and in-memory ones list without requests)
        entries = fs.ls(parent, detail=True)
    except FileNotFoundError:
        return []
    own = parent.strip("/")
    found = sorted(
        {PurePosixPath(str(e["name"]).strip("/")).name for e in entries
         if e.get("type") == "directory" and str(e["name"]).strip("/") != own}
    )
    return ([n for n in found if n > after] + [n for n in found if n <= after])[:limit]


def _s3_names(fs: Any, parent: str, after: str, limit: int) -> list[str]:
    bucket, key, _ = fs.split_path(parent)
    prefix = f"{key.strip('/')}/" if key.strip("/") else ""
    request = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "MaxKeys": limit + 1}
    if after:
        request["StartAfter"] = f"{prefix}{after}/"  # the name's own prefix may still come back: dropped below
    answer = fs.call_s3("list_objects_v2", **request)
    names = [entry["Prefix"][len(prefix) :].rstrip("/") for entry in answer.get("CommonPrefixes", [])]
    return [name for name in names if name and name != after][:limit]


def remove_stale_versions(
    fs: Any, folder: str, *, cutoff: float, busy: Collection[str], read_marker: Callable[[], str | None]
) -> list[str]:
    """Delete the dead versions in ``folder`` (a checkpoint's prefix); returns the versions removed.

    A version goes when its marker (read by ``read_marker`` only when ``folder`` has one; ``None``: damaged,
    nothing goes) does not name it, no save in ``busy`` (this process's) writes it, and its newest object is
    not newer than ``cutoff``. Without a marker, nothing goes unless every child of ``folder`` is a
    ``v-<token>`` prefix (anything else is not fabricx's). Exactly the objects listed are deleted.
    """
    try:
        found = fs.find(folder, detail=True)
    except FileNotFoundError:
        return []
    start = len(folder.strip("/")) + 1
    versions: dict[str, list[tuple[str, float | None]]] = {}
    others = marked = False
    for path, info in found.items():
        if info.get("type", "file") != "file":
            continue
        child, _, rest = path.strip("/")[start:].partition("/")
        if rest and VERSION_NAME.match(child):
            versions.setdefault(child, []).append((path, modified(info)))
        elif child == COMMIT_MARKER and not rest:
            marked = True
        else:
            others = True
    if (not marked and others) or not versions:
        return []
    named = read_marker() if marked else None
    if marked and named is None:
        return []
    removed = []
    for version, objects in sorted(versions.items()):
        times = [t for _, t in objects]
        if version == named or version in busy or any(t is None or t > cutoff for t in times):
            continue
        fs.rm([path for path, _ in objects])
        removed.append(version)
    return removed
