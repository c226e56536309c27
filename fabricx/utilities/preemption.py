"""Noticing a scheduler's "you are about to be stopped" signal so the loop can save and exit cleanly."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

#: Exit code of `Fabric.exit_for_requeue()`: what SLURM's ``--requeue`` jobs and wrappers look for.
REQUEUE_EXIT_CODE = 85

DEFAULT_PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name)
)


class PreemptionWatcher:
    """Records that one of ``signals`` arrived; the training loop polls `received`.

    The previous handlers are chained, so a handler installed by someone else still runs.

    Example:
        ```python
        watcher = PreemptionWatcher([signal.SIGTERM])
        ...
        if watcher.received is not None:
            save_and_exit()
        ```
    """

    def __init__(self, signals: Iterable[int]) -> None:
        self.signals = [signal.Signals(s) for s in signals]
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("Preemption signals can only be watched from the main thread of a process.")
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)
        previous = self._previous.get(self.received)
        if callable(previous) and previous not in (signal.SIG_IGN, signal.SIG_DFL):
            previous(signum, frame)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()


def resolve_signals(value: Any) -> list[int]:
    """``True`` means SIGTERM and SIGUSR1; otherwise an iterable of signal numbers or names."""
    if value is True:
        return list(DEFAULT_PREEMPTION_SIGNALS)
    if isinstance(value, int | str):
        value = [value]
    resolved = []
    for item in value:
        if isinstance(item, str):
            name = item.upper() if item.upper().startswith("SIG") else "SIG" + item.upper()
            if not hasattr(signal, name):
                raise ValueError(f"preemption_signals got {item!r}, which is not a signal name on this platform.")
            resolved.append(getattr(signal, name))
        else:
            resolved.append(signal.Signals(item))
    return resolved
