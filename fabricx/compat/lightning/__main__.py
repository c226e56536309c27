"""``python -m fabricx.compat.lightning script.py [args]``: run a script with Lightning's imports served by fabricx.

What ``fabricx run --as-lightning`` starts in each process: `fabricx.compat.lightning.enable`, then the script
as ``python script.py [args]`` would run it (``__main__``, its folder first on ``sys.path``, its ``sys.argv``).

Example:
    ```bash
    python -m fabricx.compat.lightning train.py --max-epochs 3
    ```
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence

from fabricx.compat.lightning import enable


def main(argv: Sequence[str] | None = None) -> None:
    """Enable the alias and run ``argv[0]`` with ``argv`` as its ``sys.argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.exit("usage: python -m fabricx.compat.lightning SCRIPT [ARGS ...]")
    enable()
    sys.argv = args
    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
