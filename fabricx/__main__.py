"""``python -m fabricx`` is the ``fabricx`` command."""

from fabricx.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
