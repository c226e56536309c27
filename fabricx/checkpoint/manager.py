"""Automatic checkpoint names in a project directory, "latest" lookup and keep-last-k retention."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from fabricx.checkpoint.format import META_FILE

__all__ = ["CheckpointManager"]


@dataclass(frozen=True)
class _Entry:
    index: int
    path: Path
    kind: str  # "complete", "incomplete" (committed name, no meta), "tmp" or "old"


class CheckpointManager:
    """Names checkpoints ``<project_dir>/checkpoints/<prefix>_<n>`` and prunes old ones.

    ``n`` keeps counting across runs and manager objects: it is one past the highest index found on
    disk, unfinished saves included, so a name is never reused. Only rank 0 should call
    :meth:`apply_retention`, after a new checkpoint is complete.

    Example::

        manager = CheckpointManager("runs/exp1", total_limit=2)
        write_checkpoint(manager.next_path(), {"model": model.state_dict()}, None)
        manager.apply_retention()
        resume_from = manager.latest()
    """

    def __init__(
        self, project_dir: str | os.PathLike[str], total_limit: int | None = None, prefix: str = "checkpoint"
    ):
        if total_limit is not None and (
            isinstance(total_limit, bool) or not isinstance(total_limit, int) or total_limit < 1
        ):
            raise ValueError(f"total_limit must be None (keep all) or an int >= 1; got {total_limit!r}.")
        if not prefix or "/" in prefix or os.sep in prefix:
            raise ValueError(f"prefix must be a non-empty name without path separators; got {prefix!r}.")
        self.project_dir = Path(project_dir)
        self.total_limit = total_limit
        self.prefix = prefix
        self._pattern = re.compile(rf"^{re.escape(prefix)}_(\d+)(?:\.(tmp|old)-[A-Za-z0-9_-]+)?$")

    @property
    def directory(self) -> Path:
        """The folder holding the checkpoints: ``<project_dir>/checkpoints``."""
        return self.project_dir / "checkpoints"

    def path_for(self, index: int) -> Path:
        """The committed path of checkpoint number ``index``."""
        return self.directory / f"{self.prefix}_{index}"

    def _scan(self) -> list[_Entry]:
        try:
            children = list(self.directory.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return []
        entries = []
        for child in children:
            match = self._pattern.match(child.name)
            if match is None:
                continue
            index, leftover = int(match.group(1)), match.group(2)
            kind = leftover or ("complete" if (child / META_FILE).is_file() else "incomplete")
            entries.append(_Entry(index, child, kind))
        return sorted(entries, key=lambda e: (e.index, e.path.name))

    @property
    def iteration(self) -> int:
        """The index the next checkpoint will get (like Accelerate's ``ProjectConfiguration.iteration``)."""
        entries = self._scan()
        return max((e.index for e in entries), default=-1) + 1

    def next_path(self) -> Path:
        """Where the next checkpoint should be written: one past the highest index on disk (0 when none).

        Example::

            manager.next_path()  # runs/exp1/checkpoints/checkpoint_3
        """
        return self.path_for(self.iteration)

    def list_complete(self) -> list[Path]:
        """Complete checkpoints (committed name with ``meta.json``), oldest first."""
        return [e.path for e in self._scan() if e.kind == "complete"]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or ``None`` if there is none.

        Example::

            path = manager.latest()
            if path is not None: loaded = read_checkpoint(path)
        """
        complete = self.list_complete()
        return complete[-1] if complete else None

    def apply_retention(self) -> list[Path]:
        """Delete complete checkpoints beyond ``total_limit`` (oldest first) and stale left-overs.

        A left-over (``.tmp-*``/``.old-*``) is stale when it belongs to an older checkpoint than the
        newest complete one. Returns what was removed.

        Example::

            removed = manager.apply_retention()
        """
        entries = self._scan()
        complete = [e for e in entries if e.kind == "complete"]
        if not complete:
            return []
        newest = complete[-1].index
        doomed: list[Path] = []
        if self.total_limit is not None and len(complete) > self.total_limit:
            doomed += [e.path for e in complete[: len(complete) - self.total_limit]]
        for entry in entries:
            stale_tmp = entry.kind == "tmp" and entry.index < newest
            # An .old-* next to its committed directory is what an interrupted swap left behind.
            stale_old = entry.kind == "old" and entry.index <= newest
            if stale_tmp or stale_old:
                doomed.append(entry.path)
        for path in doomed:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
        return doomed
