"""The installed fabricx version, in a module of its own so that code inside fabricx can read it without
importing the package (and everything ``fabricx/__init__.py`` imports).

Example:
    ```python
    from fabricx.version import __version__
    ```
"""

__version__ = "0.1.0"
