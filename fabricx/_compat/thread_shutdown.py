"""CPython's private hook that runs at interpreter shutdown before non-daemon threads are joined.

``threading._register_atexit`` (used by ``concurrent.futures``) runs a function once the main
thread has finished and before ``threading._shutdown`` joins the other threads, which is before any
``atexit`` function runs. A background save is waited for there, so its failure can still decide the
exit status of the process. Without the private name, ``atexit`` is the fallback (the failure is then
printed, but the exit status cannot change any more).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable


def at_thread_shutdown(function: Callable[[], None]) -> bool:
    """Run ``function`` at interpreter shutdown before threads are joined; ``False`` if only ``atexit``
    was available (or shutdown has already begun).

    Example:

    ```python
    at_thread_shutdown(lambda: print("the main thread has finished"))
    ```
    """
    register = getattr(threading, "_register_atexit", None)
    if callable(register):
        try:
            register(function)
            return True
        except RuntimeError:  # "can't register atexit after shutdown"
            pass
    atexit.register(function)
    return False


def exit_after_shutdown(code: int) -> None:
    """From a function given to `at_thread_shutdown` (which returned ``True``): finish the shutdown
    as a normal exit would (join the other non-daemon threads, run the ``atexit`` functions, flush the
    streams), then end the process with exit status ``code``.

    The main thread has finished by then, so its own exit status is already decided; this is the one
    way left to report a failure found at shutdown.

    Example:

    ```python
    exit_after_shutdown(1)
    ```
    """
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and thread is not threading.main_thread() and not thread.daemon:
            with contextlib.suppress(RuntimeError):
                thread.join()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()  # type: ignore[attr-defined]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)
