"""Killing a checkpoint writer at a chosen file-system step, for the atomic-save crash tests of folder layouts.

A test forks a writer (`killed()`) that arms a kill in itself first: at the n-th call of one of the
`HOOKED` ``os`` functions (`kill_at_step()`), when the commit starts (`kill_before_commit()`), or between
the commit swap's two renames (`kill_mid_swap()`). `count_steps()` says how many such calls a save makes,
so a sweep can kill it before each one. Used by test_ckpt_dcp_atomic.py and test_ckpt_deepspeed_atomic.py.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

#: The file-system steps a sweep kills the writer before.
HOOKED = ("rename", "replace", "unlink", "rmdir", "mkdir", "fsync")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def killed(write: Callable[[], None], arm: Callable[[], None]) -> bool:
    """Fork a writer that calls ``arm()`` then ``write()``; True if it was SIGKILLed (by what ``arm`` set up)."""
    pid = os.fork()
    if pid == 0:  # the writer
        try:
            arm()
            write()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def kill_before_commit(check: Callable[[list[str]], None]) -> Callable[[], None]:
    """An arm: die when the commit starts, after ``check(sorted names in the staging folder)``."""

    def arm() -> None:
        from fabricx.checkpoint import atomic

        def commit(tmp: Any, path: Any) -> None:
            check(sorted(os.listdir(tmp)))  # every file was written, only the swap is left
            die()

        atomic.commit_directory = commit

    return arm


def kill_mid_swap() -> None:
    """An arm: die after the commit moved the old checkpoint aside, before the new one is renamed in."""
    from fabricx.checkpoint import atomic

    original = atomic.commit_directory

    def commit(tmp: Any, path: Any) -> None:
        rename, renames = os.rename, [0]

        def counted(*args: Any, **kwargs: Any) -> Any:
            renames[0] += 1
            if renames[0] == 2:
                die()
            return rename(*args, **kwargs)

        os.rename = counted
        original(tmp, path)

    atomic.commit_directory = commit


def count_steps(write: Callable[[], None]) -> int:
    """How many `HOOKED` calls ``write()`` makes."""
    calls = [0]
    originals = {name: getattr(os, name) for name in HOOKED}

    def counting(name: str) -> Any:
        def hooked(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return originals[name](*args, **kwargs)

        return hooked

    for name in HOOKED:
        setattr(os, name, counting(name))
    try:
        write()
    finally:
        for name, original in originals.items():
            setattr(os, name, original)
    return calls[0]


def kill_at_step(step: int) -> Callable[[], None]:
    """An arm: die just before the ``step``-th `HOOKED` call."""

    def arm() -> None:
        calls = [0]

        def killing(original: Any) -> Any:
            def hooked(*args: Any, **kwargs: Any) -> Any:
                calls[0] += 1
                if calls[0] == step:
                    die()
                return original(*args, **kwargs)

            return hooked

        for name in HOOKED:
            setattr(os, name, killing(getattr(os, name)))

    return arm
