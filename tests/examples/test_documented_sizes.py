"""The sizes docs/examples.md times are the sizes the examples run with: a default changed means a time re-measured.

The page once promised "a minute or two" for `char_gpt.py` while its defaults took 12.5 minutes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "examples.md").read_text(encoding="utf-8")


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines functions only: the script runs under __main__
    return module


def test_char_gpt_timed_sizes_are_its_defaults() -> None:
    timed = re.search(r"`char_gpt\.py` with its defaults \(a (\d+)-layer, (\d+)-wide GPT, (\d+) steps\)", PAGE)
    assert timed is not None, "docs/examples.md no longer times char_gpt.py's defaults; update this test"
    defaults = _example("char_gpt").parse_args([])
    assert (defaults.n_layer, defaults.n_embd, defaults.max_steps) == tuple(map(int, timed.groups()))
    assert "minute or two" not in PAGE


def test_make_demo_timed_epochs_are_the_makefiles() -> None:
    timed = re.search(r"`make demo` \(the digits example, (\d+) epochs\)", PAGE)
    assert timed is not None, "docs/examples.md no longer times make demo; update this test"
    demo = re.search(r"^demo:.*\n\t.*examples/digits_trainer\.py .*--max-epochs (\d+)", (REPO / "Makefile").read_text(),
                     re.MULTILINE)
    assert demo is not None and demo.group(1) == timed.group(1)
