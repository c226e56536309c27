"""fabricx/checkpoint/ is the bottom I/O layer: none of its modules imports the façade or a strategy.

The modules are imported one after the other in a fresh interpreter in which the ``fabricx`` package
exists without running its ``__init__`` (which imports the façade for ``from fabricx import Fabric``);
after each import, what it pulled in shows in ``sys.modules`` (an upward import would show there first
after the module that makes it). One interpreter keeps the check cheap (torch is imported once).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fabricx

PACKAGE = Path(fabricx.__file__).parent
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
    for p in (PACKAGE / "checkpoint").rglob("*.py")
    if p.stem != "__init__"
)
FORBIDDEN = ("fabricx.fabric", "fabricx.strategies", "fabricx.connector", "fabricx.train", "fabricx.compat",
             "fabricx.resume", "fabricx.wrappers", "fabricx.precision", "fabricx.accelerators")

_CHILD = """
import importlib, json, sys, types
package = types.ModuleType("fabricx")
package.__path__ = [{root!r}]
sys.modules["fabricx"] = package
loaded = {{}}
for name in {modules!r}:
    importlib.import_module(name)
    loaded[name] = sorted(m for m in sys.modules if m.startswith("fabricx."))
print(json.dumps(loaded))
"""


def test_checkpoint_modules_import_neither_facade_nor_strategies() -> None:
    assert "fabricx.checkpoint.fabric_state" in MODULES and "fabricx.checkpoint.io" in MODULES
    code = _CHILD.format(root=str(PACKAGE), modules=MODULES)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(results) == MODULES
    for module, imported in results.items():
        upward = [name for name in imported if name.startswith(FORBIDDEN)]
        assert not upward, f"{module} imports {upward}"
    assert "fabricx.checkpoint.format" in results["fabricx.checkpoint.fabric_state"]


def test_project_helpers_live_beside_the_facade() -> None:
    assert not (PACKAGE / "checkpoint" / "resume.py").exists()
    from fabricx.resume import exit_if_preempted

    assert exit_if_preempted.__module__ == "fabricx.resume"
