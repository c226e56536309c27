"""Every command in README.md and docs/ that runs an example runs, and exits 0.

Commands are parsed from the pages (```bash blocks and inline code), so a command added to a page is run
without a test naming it. Each runs as written, in a fresh folder (``examples`` linked in, so relative paths
hold), with a few size flags appended per script (argparse keeps the last value): the command's own choices
(strategy, devices, resume) stay. Commands of one block run in order in one folder, so "stop" then "resume"
is run as the page shows it. The fast suite runs the GAN's (which once failed) and the loop conversion's; the slow
suite runs them all.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fabricx.environments.local import find_free_port

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TIMEOUT = 240

pytestmark = pytest.mark.timeout(900)

# Appended to every documented run of a script: fewer samples, a smaller model, no progress bars. A new example
# needs its line here (the test says so), so that its documented commands are run too.
SMALL = {
    "convert_loop.py": ["--epochs", "1", "--limit", "200"],
    "gan_manual.py": ["--max-epochs", "1", "--samples", "128", "--no-progress"],
    "datamodule_trainer.py": ["--max-epochs", "1", "--limit", "200", "--no-progress"],
    "digits_trainer.py": ["--limit", "200", "--no-progress"],
    "char_gpt.py": ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "4",
                    "--text-bytes", "20000", "--sample-bytes", "20"],
    "accelerate_tutorial.py": ["--samples", "24"],
    "run_two_nodes_locally.sh": ["--epochs", "1"],
}
# Multi-process commands that stay in the fast suite: the GAN's documented strategy once did not run.
FAST_MULTI_PROCESS = ("gan_manual.py",)
FAST_SINGLE_PROCESS = ("convert_loop.py",)
COMMAND = re.compile(r"^(?:python|bash|fabricx run)\b.*\bexamples/\S+")


@dataclass(frozen=True)
class Documented:
    """The commands of one code block (or one inline span), in page order, and where they are."""

    where: str
    commands: tuple[str, ...]


def _commands_in(text: str) -> list[list[tuple[int, str]]]:
    """(line number, command) of each example command, grouped by code block; an inline one is its own group."""
    groups = []
    for block in re.finditer(r"^```(?:bash|sh|console)\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        first_line = text[: block.start(1)].count("\n") + 1
        group, pending = [], ""
        for number, line in enumerate(block.group(1).splitlines(), first_line):
            start = number - pending.count("\n")
            pending += line.split(" #")[0] + "\n"
            if line.endswith("\\"):  # continued on the next line: one command
                continue
            command = " ".join(pending.replace("\\\n", " ").split())
            pending = ""
            if COMMAND.match(command):
                group.append((start, command))
        groups.append(group)
    for span in re.finditer(r"`([^`\n]+)`", re.sub(r"^```.*?^```", _blank, text, flags=re.DOTALL | re.MULTILINE)):
        if COMMAND.match(span.group(1)):
            groups.append([(text[: span.start()].count("\n") + 1, span.group(1))])
    return [group for group in groups if group]


def _blank(block: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", block.group(0))  # keeps line numbers of what follows


def _is_multi_process(command: str) -> bool:
    return re.search(r"--devices [2-9]|^fabricx run|^bash ", command) is not None


def _units(group: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    # One process's commands run in page order in one folder ("stop", then "resume"); each multi-process command
    # runs alone (none on the pages depends on an earlier command's files).
    single = [item for item in group if not _is_multi_process(item[1])]
    return ([single] if single else []) + [[item] for item in group if _is_multi_process(item[1])]


def documented_commands() -> list[Documented]:
    """Each distinct run of example commands on the pages, named by page and line."""
    found: dict[tuple[str, ...], Documented] = {}
    for page in PAGES:
        for group in _commands_in(page.read_text(encoding="utf-8")):
            for unit in _units(group):
                commands = tuple(command for _, command in unit)
                found.setdefault(commands, Documented(f"{page.relative_to(REPO)}:{unit[0][0]}", commands))
    # A command shown alone that also runs in a longer sequence is run there.
    in_sequences = {command for unit in found if len(unit) > 1 for command in unit}
    return [documented for unit, documented in found.items() if len(unit) > 1 or unit[0] not in in_sequences]


def _script(command: str) -> str:
    found = re.search(r"examples/(\S+)", command)
    assert found is not None
    return Path(found.group(1)).name


def _param(documented: Documented) -> object:
    marks = []
    text = " ".join(documented.commands)
    if any(map(_is_multi_process, documented.commands)):
        if not any(name in text for name in FAST_MULTI_PROCESS):
            marks += [pytest.mark.slow, pytest.mark.distributed]
    elif not any(name in text for name in FAST_SINGLE_PROCESS):
        # The examples themselves run in the fast suite (test_examples_smoke.py); their documented spellings,
        # several minutes together, in the slow one.
        marks.append(pytest.mark.slow)
    if "deepspeed" in text:
        marks.append(pytest.mark.deepspeed)
    return pytest.param(documented, id=documented.where, marks=marks)


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "FABRICX_"))}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    pythonpath = [str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    env.update(
        PYTHONPATH=os.pathsep.join(pythonpath), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", DS_ACCELERATOR="cpu",
        DS_BUILD_OPS="0", FABRICX=f"{sys.executable} -m fabricx", MAIN_PORT=str(find_free_port()),
    )
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".cache" / "torch_extensions"))
    return env


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    small = SMALL.get(_script(command))
    assert small is not None, f"{_script(command)} has no size flags in SMALL: add them to run `{command}`"
    if words[0] == "python":
        words = [sys.executable, *words[1:]]
    elif words[:2] == ["fabricx", "run"]:
        words = [sys.executable, "-m", "fabricx", *words[1:]]
    if words[0] == "bash" and len(words) == 2:
        words.append("1")  # the script's default processes per node, spelled out so that flags can follow it
    return [*words, *small]


def test_the_pages_document_example_commands() -> None:
    # The parser still finds what it must: the fast and the multi-process commands, the GAN's among them.
    commands = [cmd for documented in documented_commands() for cmd in documented.commands]
    assert len(commands) > 20, commands
    assert any("gan_manual.py --devices 2" in cmd for cmd in commands), commands
    assert any(cmd.startswith("fabricx run") for cmd in commands), commands


@pytest.mark.parametrize("documented", [_param(documented) for documented in documented_commands()])
def test_documented_command_runs(documented: Documented, tmp_path: Path) -> None:
    text = " ".join(documented.commands)
    if "--accelerator cuda" in text and torch.cuda.device_count() < 4:
        pytest.skip("needs 4 CUDA devices")
    if "deepspeed" in text:
        pytest.importorskip("deepspeed", reason="the deepspeed extra (make test installs it)")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    env = _env()
    for command in documented.commands:
        argv = _argv(command)
        process = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        output = process.stdout + process.stderr
        assert process.returncode == 0, (
            f"{documented.where}: `{command}` exited {process.returncode} (run as {shlex.join(argv)}):\n"
            f"{output[-4000:]}"
        )
