"""One door for checkpoints (issue 41): read from the source, as test_import_graph.py reads it.

How the doors are counted: a *door* is a public callable through which a caller saves or restores a run's
training state (several objects through the checkpoint layouts). They are looked for where callers hold them:

* the public methods of `Fabric`, `Checkpointer`, `Trainer`, every class in ``fabricx/strategies/`` and the
  Accelerate adapter's classes (``fabricx/compat/accelerate/``);
* the public module-level functions of ``fabricx/resume.py``, ``fabricx/checkpoint/checkpointer.py`` and the
  Trainer's checkpoint connector (``fabricx/train/checkpoint/``).

Among them a name counts when it starts with ``save`` or ``load``, or names ``latest``. Not counted: the
``state_dict``/``load_state_dict`` protocol, weight exports (``*_weights``, ``save_model``), one object written
as ``torch.save`` writes it (the adapter's ``save(obj, f)``, ``save_object``), and a host's per-object hooks
(``load_*_state``, ``load_module_state_dict``) that the checkpointer calls. The layouts below the checkpointer
are its plug-ins, not doors. ``TrainModule.load_from_checkpoint`` builds a module for inference (no run is
restored) and lives on the module class, which is not a surface listed above.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from fabricx.train import TrainModule

PACKAGE = Path(__file__).resolve().parents[2] / "fabricx"

_DOOR = re.compile(r"^(save|load)|latest")
_NOT_A_DOOR = re.compile(r"state_dict|_weights$|^save_model$|^save_object$|^load_\w+_state$|hyperparameters")
_CLASS_FILES = ("fabric.py", "checkpoint/checkpointer.py", "train/trainer.py", "strategies/**/*.py",
                "compat/accelerate/*.py")
_FUNCTION_FILES = ("resume.py", "checkpoint/checkpointer.py", "train/checkpoint/*.py")
_ADAPTER = PACKAGE / "compat" / "accelerate"


def _files(patterns: tuple[str, ...]) -> list[Path]:
    return sorted({file for pattern in patterns for file in PACKAGE.glob(pattern)})


def _is_door(name: str, file: Path) -> bool:
    if name.startswith("_") or not _DOOR.search(name) or _NOT_A_DOOR.search(name):
        return False
    return not (file.parent == _ADAPTER and name == "save")  # Accelerate's save(obj, f): torch.save of one object


def _doors() -> list[str]:
    found = []
    for file in _files(_CLASS_FILES):
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                for item in node.body:
                    if (isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _is_door(item.name, file)
                            and not any(ast.unparse(d) == "property" for d in item.decorator_list)):
                        found.append(f"{node.name}.{item.name}")
    for file in _files(_FUNCTION_FILES):
        for node in ast.parse(file.read_text()).body:
            if isinstance(node, ast.FunctionDef) and _is_door(node.name, file):
                found.append(f"{file.relative_to(PACKAGE)}:{node.name}")
    return sorted(found)


def test_the_doors_that_save_or_load_a_run_are_few() -> None:
    doors = _doors()
    assert len(doors) <= 12, doors
    # The checkpointer is one of them, and every other door goes through it (Fabric's, the Trainer's, the adapter's).
    assert {"Checkpointer.save", "Checkpointer.load", "Checkpointer.save_next", "Checkpointer.latest"} <= set(doors)
    assert "Fabric.save" in doors and "Trainer.save_checkpoint" in doors, doors


def test_the_strategy_is_the_checkpointers_host_not_a_door() -> None:
    from fabricx.strategies.strategy import Strategy

    assert not hasattr(Strategy, "save_checkpoint") and not hasattr(Strategy, "load_checkpoint")


def test_no_module_level_function_is_named_save_checkpoint() -> None:
    """Where Lightning defines ``save_checkpoint`` (``Trainer``, ``Fabric``'s project save) it is a method with
    Lightning's meaning; fabricx's own functions are named after what they take."""
    named = [
        f"{file.relative_to(PACKAGE)}:{node.lineno}"
        for file in PACKAGE.rglob("*.py")
        for node in ast.parse(file.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "save_checkpoint"
    ]
    assert named == []


def test_no_module_level_pending_save() -> None:
    """The asynchronous save in flight belongs to its `Checkpointer` (``wait()`` owns it): no module keeps one
    that callers must remember to wait for."""
    globals_found = []
    for file in PACKAGE.rglob("*.py"):
        for node in ast.parse(file.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            annotation = ast.unparse(node.annotation) if isinstance(node, ast.AnnAssign) else ""
            for target in targets:
                name = ast.unparse(target)
                if "pending" in name.lower() or "AsyncSave" in annotation:
                    globals_found.append(f"{file.relative_to(PACKAGE)}:{name}")
    assert globals_found == []
    import fabricx.checkpoint.background as background

    assert not hasattr(background, "wait_for_pending_save") and not hasattr(background, "pending_save")


class _CountReads:
    """A callback that counts, in its own process, the reads of ``checkpoint`` at the one function that takes a
    ``torch.save`` file from disk, and writes the count to ``reads_rank<r>.txt`` when the fit ends."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint
        self.reads = 0

    def setup(self, trainer: Any, module: Any, stage: str) -> None:  # before the checkpoint is selected and read
        import fabricx.checkpoint.torch_files as torch_files

        original = torch_files.load_torch

        def counted(source: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(source, Path) and source == self.checkpoint:
                self.reads += 1
            return original(source, *args, **kwargs)

        torch_files.load_torch = counted
        self._restore = lambda: setattr(torch_files, "load_torch", original)

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self._restore()
        (self.checkpoint.parent / f"reads_rank{trainer.global_rank}.txt").write_text(str(self.reads))


class _Module(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: list[Any], batch_idx: int) -> Any:
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _resumed_reads(tmp_path: Path, **flags: Any) -> list[int]:
    """Fit one epoch, save a ``.ckpt``, resume a second Trainer (``flags``) from it; each rank's read count."""
    from torch.utils.data import DataLoader, TensorDataset

    from fabricx.train import Trainer

    common = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, default_root_dir=tmp_path)
    loader = DataLoader(TensorDataset(torch.ones(8, 2)), batch_size=2)
    first = Trainer(max_epochs=1, **common)
    first.fit(_Module(), loader)
    checkpoint = tmp_path / "epoch.ckpt"
    first.save_checkpoint(checkpoint)
    resumed = Trainer(max_epochs=2, callbacks=[_CountReads(checkpoint)], **common, **flags)
    resumed.fit(_Module(), loader, ckpt_path=checkpoint)
    assert resumed.current_epoch == 2  # it did resume, and trained on
    return [int(p.read_text()) for p in sorted(tmp_path.glob("reads_rank*.txt"))]


def test_fit_from_a_checkpoint_reads_it_once(tmp_path: Path) -> None:
    """As Lightning's connector: ``resume_start`` reads the file, every ``restore_*`` takes that read."""
    assert _resumed_reads(tmp_path) == [1]


@pytest.mark.distributed
def test_fit_from_a_checkpoint_reads_it_once_per_rank_under_ddp(tmp_path: Path) -> None:
    assert _resumed_reads(tmp_path, strategy="ddp_spawn", devices=2, use_distributed_sampler=False) == [1, 1]


def test_a_layout_imports_no_other_layout() -> None:
    """What layouts share (``torch.save`` files, the staging folder) lives outside ``layouts/``, so a layout is a
    plug-in: one file, importing no other."""
    layouts = PACKAGE / "checkpoint" / "layouts"
    names = {file.stem for file in layouts.glob("*.py")} - {"__init__"}
    assert {"directory", "single_file", "dcp", "deepspeed"} <= names
    found = []
    for file in sorted(layouts.glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                found += [f"{file.stem} -> {t}" for t in targets
                          if t.startswith("fabricx.checkpoint.layouts.") and t.rpartition(".")[2] != file.stem]
    assert found == []
