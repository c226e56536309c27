"""Adapters that run scripts written for other training libraries on :class:`fabricx.Fabric`.

Example::

    from fabricx.compat.accelerate import Accelerator  # instead of: from accelerate import Accelerator
"""
