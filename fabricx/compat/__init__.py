"""Adapters that run scripts written for other training libraries on `fabricx.Fabric`.

Example:
    ```python
    from fabricx.compat.accelerate import Accelerator  # instead of: from accelerate import Accelerator
    ```
"""
