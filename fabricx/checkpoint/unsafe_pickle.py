"""The explicit opt-in to unpickling a foreign single-file checkpoint (``fabric.load(..., weights_only=False)``).

Loading never runs code from a file unless the caller asks for it for one call; the opt-in is a
context variable, so it covers exactly that call (and its thread) and nothing else.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Generator

from fabricx.utilities.rank_zero import warn_at_user_line

_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("fabricx_unsafe_pickle", default=False)


def pickle_allowed() -> bool:
    """Whether the current call opted in to ``torch.load(..., weights_only=False)``."""
    return _ALLOWED.get()


@contextlib.contextmanager
def allow_unsafe_pickle(path: object, what: str = "a single-file checkpoint") -> Generator[None, None, None]:
    """Let single-file readers inside unpickle arbitrary objects, with a warning naming ``path`` (and ``what``
    is unpickled).

    Example:
        ```python
        with allow_unsafe_pickle("legacy.ckpt"):
            contents = read_checkpoint("legacy.ckpt")
        ```
    """
    warn_at_user_line(
        f"Loading {path} with weights_only=False: {what} is unpickled, which can run arbitrary "
        "code stored in it. Do this only for files you trust; fabricx's own checkpoints never need it.",
    )
    token = _ALLOWED.set(True)
    try:
        yield
    finally:
        _ALLOWED.reset(token)
