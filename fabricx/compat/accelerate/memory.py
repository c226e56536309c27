"""``find_executable_batch_size``: retry a training function with a smaller batch size after running
out of memory, as ``accelerate.utils.find_executable_batch_size`` does."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fabricx.utilities.memory import is_out_of_memory, release_accelerator_memory

__all__ = ["find_executable_batch_size", "should_reduce_batch_size"]


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Whether ``exception`` says the device ran out of memory (`fabricx.utilities.memory.is_out_of_memory`:
    Accelerate's messages, and Lightning's ``CUDA ... out of memory`` too).

    Example:
        ```python
        should_reduce_batch_size(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))  # True
        ```
    """
    return is_out_of_memory(exception)


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[], int] | None = None,
) -> Any:
    """Decorator: call ``function(batch_size, *args, **kwargs)`` with ``starting_batch_size``, and again
    with a smaller one (``int(batch_size * 0.9)``, or what ``reduce_batch_size_fn()`` returns) each time
    it runs out of memory; other errors propagate. The size reached is kept for later calls; at 0 a
    ``RuntimeError`` is raised. Call the decorated function without the batch size.

    Example:
        ```python
        @find_executable_batch_size(starting_batch_size=64)
        def train(batch_size, model):
            accelerator.gradient_accumulation_steps = max(1, 64 // batch_size)
            ...

        train(model)
        ```
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    size = [starting_batch_size]

    def smaller() -> int:
        return int(size[0] * 0.9)

    reduce = reduce_batch_size_fn or smaller

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        release_accelerator_memory()
        names = list(inspect.signature(function).parameters)
        if len(names) < len(args) + 1:
            given = ", ".join(f"{name}={value}" for name, value in zip(names[1:], args[1:], strict=False))
            raise TypeError(
                f"Batch size was passed into `{function.__name__}` as the first argument when called."
                f"Remove this as the decorator already does so: `{function.__name__}({given})`"
            )
        while True:
            if size[0] == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(size[0], *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                release_accelerator_memory()
                size[0] = reduce()

    return run
