"""Releasing the process group before the interpreter exits, so that a finished job exits 0.

With gloo on Python 3.11, a process that ends right after a collective (a DDP backward) can abort at
shutdown: a gloo worker thread drops its reference to the finished work a moment after the main thread
saw it complete, and if that work still holds a Python object the thread needs the GIL to free it. Once
the interpreter has started finalizing, a thread asking for the GIL is ended with ``pthread_exit``,
which unwinds through a ``noexcept`` C++ destructor: ``terminate called without an active exception``
and SIGABRT, after all the work was done. ``destroy_process_group()`` alone does not prevent it: the
group's worker threads keep running while anything (a DDP module) holds the group.

So before finalization fabricx (1) waits, with a bounded wait through the group's key-value store,
until every rank got to its end (a rank never tears the store down under a peer still using it, and a
peer that is gone only costs the wait's bound), (2) destroys the process group, and (3) waits until
the gloo worker threads are idle: asleep on their queue, with the GIL free to take and not taken. A
worker that still has a reference to drop wakes up when the GIL is released, so "asleep and not woken
across a GIL-free interval" means it has nothing left that could touch Python. Nothing is timed on
luck: each wait ends on a condition (or on its bound when a peer is gone).

Example:
    ```python
    register_release_at_exit()  # once the group exists; runs at interpreter exit
    release_process_group()     # or now (Accelerate's end_training, a spawned rank's end)
    ```
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
from typing import Any

#: The longest a rank waits at its end for the others (a peer that is gone costs at most this).
EXIT_BARRIER_SECONDS = 30.0
#: The longest the wait for idle gloo worker threads may take.
IDLE_WAIT_SECONDS = 5.0

_state: dict[str, Any] = {"registered": False, "failed": False, "generation": 0}


def register_release_at_exit() -> None:
    """Release the process group (if still there) when the interpreter exits; idempotent.

    An uncaught exception skips the wait for the other ranks (they may be blocked in a collective that
    this rank will never join), so a failing rank still exits at once.

    Example:
        ```python
        dist.init_process_group("gloo", ...)
        register_release_at_exit()
        ```
    """
    if _state["registered"]:
        return
    _state["registered"] = True
    previous_hook = sys.excepthook

    def excepthook(*exc_info: Any) -> None:
        note_rank_failed()
        previous_hook(*exc_info)

    sys.excepthook = excepthook
    atexit.register(_release_at_exit)


def note_rank_failed() -> None:
    """This rank is ending with an error: the release at exit skips the wait for the other ranks.

    For failures that do not reach ``sys.excepthook`` (a spawned rank's error is caught and reported by
    the launcher); without it the failed rank would stay for `EXIT_BARRIER_SECONDS` before its peers
    learn that it is gone.

    Example:
        ```python
        try:
            train(fabric)
        except Exception:
            note_rank_failed()
            raise
        ```
    """
    _state["failed"] = True


def _release_at_exit() -> None:
    try:
        release_process_group(wait_for_peers=not _state["failed"])
    except Exception as error:  # never turn a finished job into a failed one from here
        sys.stderr.write(f"fabricx: releasing the process group at exit failed: {error}\n")


def release_process_group(wait_for_peers: bool = True, timeout: float | None = None) -> None:
    """Wait (bounded) for every rank, destroy the default process group, and let gloo's threads go idle.

    Safe to call when no group exists, and more than once.

    Example:
        ```python
        release_process_group()  # at the end of a rank's work
        ```
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if wait_for_peers and dist.get_world_size() > 1:
            _store_barrier(dist, EXIT_BARRIER_SECONDS if timeout is None else timeout)
        dist.destroy_process_group()
    gc.collect()
    wait_for_idle_gloo_workers()


def _store_barrier(dist: Any, timeout: float) -> None:
    """Every rank adds one to a counter in the group's store, then waits until it reaches the world size.

    Through the store rather than a collective, so it cannot hang on a broken group; a store that is
    gone (its host, rank 0, already left after seeing everyone arrive) ends the wait.
    """
    try:
        from fabricx._compat.torch_internals import default_store

        store = default_store()
    except Exception:
        return
    _state["generation"] += 1
    key = f"fabricx/exit/{_state['generation']}"
    world_size = dist.get_world_size()
    deadline = time.monotonic() + timeout
    try:
        arrived = store.add(key, 1)
        while arrived < world_size and time.monotonic() < deadline:
            time.sleep(0.01)
            arrived = store.add(key, 0)
    except Exception:
        return


def wait_for_idle_gloo_workers(timeout: float = IDLE_WAIT_SECONDS) -> bool:
    """Wait until every gloo worker thread of this process sleeps on its queue; True once they do.

    Reads ``/proc/self/task`` (Linux); elsewhere it only releases the GIL briefly and returns False.
    A thread counts as idle when it is asleep (state ``S``) and neither it nor any other gloo worker
    woke (context-switch counts unchanged) during an interval in which this thread slept, so the GIL
    was free: a worker waiting for the GIL to drop a reference would have taken it and woken.

    Example:
        ```python
        dist.destroy_process_group()
        wait_for_idle_gloo_workers()
        ```
    """
    task_dir = "/proc/self/task"
    if not os.path.isdir(task_dir):
        time.sleep(0.05)
        return False
    deadline = time.monotonic() + timeout
    previous = _gloo_worker_states(task_dir)
    while True:
        time.sleep(0.02)
        current = _gloo_worker_states(task_dir)
        if current == previous and all(state == "S" for state, _ in current.values()):
            return True
        if time.monotonic() >= deadline:
            return False
        previous = current


def _gloo_worker_states(task_dir: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    states: dict[str, tuple[str, tuple[str, ...]]] = {}
    for tid in os.listdir(task_dir):
        try:
            with open(f"{task_dir}/{tid}/comm") as file:
                if not file.read().startswith("pt_gloo"):  # c10d's gloo work threads (pt_gloo_runloop)
                    continue
            with open(f"{task_dir}/{tid}/stat") as file:
                state = file.read().rsplit(")", 1)[1].split()[0]
            with open(f"{task_dir}/{tid}/status") as file:
                switches = tuple(line for line in file if "ctxt_switches" in line)
        except (OSError, IndexError):
            continue  # the thread ended meanwhile
        states[tid] = (state, switches)
    return states
