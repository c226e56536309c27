"""Nodes of a static multi-node ``fabricx run`` leave together, so no node's exit trips another's.

torchrun's agents end a job with an exit barrier on the TCPStore that node 0's agent hosts. The last
node to arrive sets the barrier's key and returns at once; when that is node 0, its process exits and
takes the store with it while the other nodes may still be reading the key ("Failed to recv ... Did the
remote server shutdown or crash?", with a stack trace, after a run that succeeded).

Node 0 holds a handle on the same store server (torchrun creates it with ``multi_tenant=True``: one
server per port in a process) and keeps it up until every other node has said it left its barrier, or
until ``DEPARTURE_TIMEOUT_S`` has passed. The other nodes say so as their last act.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

#: How long node 0 keeps the store up for nodes that have not said they left.
DEPARTURE_TIMEOUT_S = 30.0
_LEFT_KEY = "fabricx/nodes_left"


@contextlib.contextmanager
def nodes_leave_together(address: str, port: int, node_rank: int, num_nodes: int) -> Iterator[None]:
    """Run torchrun's agent inside this; when it returns normally, the nodes leave together (an error leaves at once).

    Example:
        ```python
        with nodes_leave_together("127.0.0.1", 29500, node_rank=0, num_nodes=2):
            torchrun_main(args)
        ```
    """
    # torch.distributed.TCPStore is public (documented); pyright sees it as re-exported from torch._C.
    from torch.distributed import TCPStore  # pyright: ignore[reportPrivateImportUsage]

    host = None
    if node_rank == 0:
        # Hosted here first; torchrun's agent store on the same port joins this server instead of starting one.
        host = TCPStore(address, port, None, True, timedelta(seconds=60), wait_for_workers=False, multi_tenant=True)
    yield  # an exception in the block leaves from here, and the store goes with this generator
    if host is not None:
        _wait_for_others(host, num_nodes - 1)
    else:
        _say_left(address, port)


def _wait_for_others(store: Any, others: int) -> None:
    deadline = time.monotonic() + DEPARTURE_TIMEOUT_S
    while store.add(_LEFT_KEY, 0) < others and time.monotonic() < deadline:
        time.sleep(0.02)


def _say_left(address: str, port: int) -> None:
    from torch.distributed import TCPStore  # pyright: ignore[reportPrivateImportUsage]

    # Node 0 may already be gone (it stops waiting after DEPARTURE_TIMEOUT_S): nothing is left to tell.
    with contextlib.suppress(RuntimeError):
        store = TCPStore(address, port, None, False, timedelta(seconds=5))
        store.add(_LEFT_KEY, 1)
