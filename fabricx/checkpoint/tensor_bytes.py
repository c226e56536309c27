"""A guard for tensors read from a file: every element must have its own bytes.

Example:

```python
require_own_bytes(torch.load("w.pt", weights_only=True), "w.pt")
```
"""

from __future__ import annotations

from torch import Tensor

from fabricx.utilities.exceptions import CheckpointError

__all__ = ["require_own_bytes"]


def require_own_bytes(tensor: Tensor, what: str) -> None:
    """Refuse a tensor whose elements do not all have their own bytes (a stride-0, expanded view): read
    from a file, it claims more memory than the file holds, and copying it out would allocate all of it.

    Example:

    ```python
    require_own_bytes(torch.zeros(1).expand(10), "state['w']")  # raises CheckpointError
    ```
    """
    if tensor.numel() and tensor.numel() * tensor.element_size() > tensor.untyped_storage().nbytes():
        raise CheckpointError(
            f"{what} is a {tuple(tensor.shape)} view of only {tensor.untyped_storage().nbytes()} bytes (an "
            "expanded tensor); a checkpoint stores every element."
        )
