"""Regenerate the tables that mark the ported Lightning Trainer tests.

    python tests/conformance/trainer/update_gaps.py            # run here without the table, print what fails
    python tests/conformance/trainer/update_gaps.py --write    # ... and rewrite known_gaps.py
    python tests/conformance/trainer/update_gaps.py --lightning  # Lightning's originals -> lightning_passing.txt

Run from the repository root with fabricx importable (``PYTHONPATH=$PWD``). ``--write`` keeps the reason of every
entry that still fails, drops the entries that pass, and gives each new failure a reason made of its error
(``not yet conformant: <first line>``) to be reworded by whoever reads it. ``--lightning`` runs the original
files at ``port.TAG`` against the installed Lightning, only the test functions kept by ``port.py``.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import port  # noqa: E402


def _cases(junit: Path, file_of_class) -> dict[str, str]:
    """Node id (``file.py::name[params]``) -> "" when passed, else the first line of its failure; skips left out."""
    results: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = file_of_class(case.get("classname", ""))
        if file is None:
            continue
        node = f"{file}::{case.get('name')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if case.find("skipped") is not None and problem is None:
            continue
        if problem is None:
            results[node] = ""
        else:
            message = (problem.get("message") or problem.text or "failed").strip().splitlines()
            results[node] = (message[0] if message else "failed")[:200]
    return results


def run_here(extra: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        env = dict(os.environ, FABRICX_CONFORMANCE_NO_GAPS="1")
        cmd = [sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra]
        subprocess.run(cmd, env=env, check=False)

        def file_of_class(classname: str) -> str | None:
            return classname.split(".")[-1] + ".py" if classname else None

        return _cases(junit, file_of_class)


def run_lightning(mirror: str, tag: str) -> set[str]:
    passing: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "--git-dir", mirror, "archive", tag, "tests/tests_pytorch"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "x", "-C", tmp], input=archive, check=True)
        root = Path(tmp) / "tests"
        for src, dest in port.FILES.items():
            tree = ast.parse((HERE / dest).read_text())
            names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
            if not names:
                continue
            junit = Path(tmp) / f"{dest}.xml"
            ids = [f"tests_pytorch/{src}::{name}" for name in names]
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
            env = dict(os.environ, PYTHONPATH=str(root))
            subprocess.run([*cmd, f"--junitxml={junit}", *ids], cwd=root, check=False, env=env)
            if junit.exists():
                results = _cases(junit, lambda classname, dest=dest: dest)
                passing |= {node for node, problem in results.items() if not problem}
    return passing


def write_gaps(failing: dict[str, str], ran: set[str]) -> None:
    from known_gaps import KNOWN_GAPS

    # Entries of cases this run did not reach (e.g. `-m "not slow"`) stay as they were, if their file still exists.
    entries = {
        node: reason
        for node, reason in KNOWN_GAPS.items()
        if node not in ran and node.split("[", 1)[0] not in ran and (HERE / node.split("::", 1)[0]).exists()
    }
    generated = set(port.FILES.values())  # files ported by hand (and callbacks/) carry their own marks
    for node, problem in sorted(failing.items()):
        if node.split("::", 1)[0] not in generated:
            continue
        base = node.split("[", 1)[0]
        kept = KNOWN_GAPS.get(node) or KNOWN_GAPS.get(base)
        # A reason written by hand stays; a generated one follows the current error.
        entries[node] = kept if kept and not kept.startswith("not yet conformant") else f"not yet conformant: {problem}"
    lines = [
        '"""Ported Lightning Trainer tests fabricx does not pass yet, each a strict xfail with its reason.\n\n',
        "Regenerate with `python tests/conformance/trainer/update_gaps.py --write` (keeps reasons written here).\n",
        "A reason starting with 'deliberate difference' is a row of docs/migrating/lightning-trainer.md.\n",
        '"""\n\n',
        "KNOWN_GAPS: dict[str, str] = {\n",
    ]
    lines.extend(f"    {node!r}: {reason!r},\n" for node, reason in sorted(entries.items()))
    lines.append("}\n")
    (HERE / "known_gaps.py").write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite known_gaps.py")
    parser.add_argument("--lightning", action="store_true", help="run Lightning's originals (lightning_passing.txt)")
    parser.add_argument("--mirror", default=port.MIRROR)
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, e.g. -k hooks")
    args = parser.parse_args()
    if args.lightning:
        passing = run_lightning(args.mirror, port.TAG)
        header = f"# Cases passing on the installed Lightning (originals at {port.TAG}): update_gaps.py --lightning\n"
        (HERE / "lightning_passing.txt").write_text(header + "".join(f"{node}\n" for node in sorted(passing)))
        print(f"{len(passing)} cases pass on Lightning")
        return
    results = run_here(args.pytest_args)
    failing = {node: problem for node, problem in results.items() if problem}
    for node, problem in sorted(failing.items()):
        print(f"{node}  {problem}")
    print(f"{len(results) - len(failing)} passed, {len(failing)} failed of {len(results)}")
    if args.write:
        write_gaps(failing, set(results) | {node.split('[', 1)[0] for node in results})


if __name__ == "__main__":
    main()
