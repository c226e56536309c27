"""Left-overs of killed saves on object stores, removed by later saves into the same parent prefix.

A save killed during the first save of ``<parent>/<name>`` leaves ``<name>/v-<token>/...`` without a
``COMMIT`` marker, and a killed re-save leaves a version its marker does not name. Object stores have no
locks, so a version counts as dead only when the committing I/O object is not uploading it and its newest
object is older than ``stale_after`` by the store's own clock. Each commit examines a few names after the
previous ones (wrapping around), so the cost per save stays the same however many names the parent holds.

Example:

```python
names, cursor = next_names(fs, "bucket/run", after="step_100/", limit=4, skip="step_200")
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


def next_names(fs: Any, parent: str, *, after: str, limit: int, skip: str) -> tuple[list[str], str]:
    """At most ``limit`` folder names directly in ``parent`` but ``skip``, those after the position ``after`` in
    the store's key order (``"<name>/"`` for a folder), wrapping around to the first ones; and the position to go
    on from next time. On S3 by at most two listing requests of ``limit + 1`` entries each.

    Example:

    ```python
    next_names(fs, "bucket/run", after="step_100/", limit=4, skip="step_200")  # (["step_300", ...], "step_600/")
    ```
    """
    s3 = callable(getattr(fs, "call_s3", None)) and callable(getattr(fs, "split_path", None))
    page = _s3_page if s3 else _ls_page
    found, last, more = page(fs, parent, after, limit + 1)
    names = [name for name in found if name != skip][:limit]
    if not more and len(names) < limit and after:  # the end: go on from the first names
        found, last, more = page(fs, parent, "", limit + 1)
        names += [name for name in found if name != skip and name not in names][: limit - len(names)]
    return names, f"{names[-1]}/" if names else last if more else ""


def _s3_page(fs: Any, parent: str, after: str, size: int) -> tuple[list[str], str, bool]:
    bucket, key, _ = fs.split_path(parent)
    prefix = f"{key.strip('/')}/" if key.strip("/") else ""
    request = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "MaxKeys": size}
    if after:
        request["StartAfter"] = f"{prefix}{after}"
    answer = fs.call_s3("list_objects_v2", **request)
    folders = sorted(entry["Prefix"][len(prefix) :] for entry in answer.get("CommonPrefixes", []))
    objects = [entry["Key"][len(prefix) :] for entry in answer.get("Contents", [])]
    # A folder's own prefix may come back after "<name>/" (its objects follow it): not a later name.
    names = [folder[:-1] for folder in folders if folder > after and folder != "/"]
    return names, max([*folders, *objects], default=after), bool(answer.get("IsTruncated"))


def _ls_page(fs: Any, parent: str, after: str, size: int) -> tuple[list[str], str, bool]:
    try:  # stores without ordered listing pages: one listing (local and in-memory ones cost no request)
        entries = fs.ls(parent, detail=True)
    except FileNotFoundError:
        return [], after, False
    own = parent.strip("/")
    folders = sorted(
        {f"{PurePosixPath(str(e['name']).strip('/')).name}/" for e in entries
         if e.get("type") == "directory" and str(e["name"]).strip("/") != own}
    )
    later = [folder for folder in folders if folder > after][:size]
    return [folder[:-1] for folder in later], later[-1] if later else after, len(later) == size


def remove_stale_versions(
    fs: Any, folder: str, *, cutoff: float, busy: Collection[str], read_marker: Callable[[], str | None]
) -> list[str]:
    """Delete the dead versions in ``folder`` (a checkpoint's prefix); returns the versions removed.

    A version goes when its marker (read by ``read_marker`` only when ``folder`` has one; ``None``: damaged,
    nothing goes) does not name it, ``busy`` (the committing I/O object's uploads) does not hold it, and its
    newest object is not newer than ``cutoff``. Without a marker, nothing goes unless every child of ``folder``
    is a ``v-<token>`` prefix (anything else is not fabricx's). Exactly the objects listed are deleted.
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
