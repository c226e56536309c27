"""Regenerate the ported Lightning Trainer tests in this folder from Lightning's repository.

    python tests/conformance/trainer/port.py [--mirror GIT_DIR] [--tag 2.6.5]

Selection rule (README.md says it in prose): the files in ``FILES`` below, taken from Lightning's
``tests/tests_pytorch`` at tag ``TAG``; inside them every test function is kept except

* those marked ``RunIf(...)`` for hardware or packages this suite does not run on (CUDA, MPS, TPU,
  standalone multi-device runs, DeepSpeed, bf16 on CUDA): ``dropped_by_runif``;
* those that reach Lightning's private internals: an attribute starting with ``_`` the test file itself
  does not define (``trainer._results``, ``fit_loop._should_stop``), a name imported from a Lightning
  module or attribute whose name starts with ``_``, or a string naming a Lightning module path
  (``mock.patch("lightning.pytorch....")``): ``dropped_as_private``;
* those named in ``LEFT_OUT`` with a reason.

Only the imports change: each ``lightning.*`` / ``tests_pytorch.*`` import becomes the fabricx (or
``helpers.*``) import of the same public name (``LightningModule`` is ``TrainModule`` imported under
Lightning's name). A name fabricx does not export (yet) is bound through ``helpers.public.public``,
which returns fabricx's object once it exists and a stand-in that fails when used until then, so a
missing name fails the tests that use it rather than the whole file.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
TAG = "2.6.5"
MIRROR = "/work/.mirror/Lightning-AI+pytorch-lightning/repo"

# Lightning file (under tests/tests_pytorch/) -> name here (flat; names are unique across the suite).
FILES = {
    "trainer/flags/test_barebones.py": "test_barebones.py",
    "trainer/flags/test_check_val_every_n_epoch.py": "test_check_val_every_n_epoch.py",
    "trainer/flags/test_env_vars.py": "test_env_vars.py",
    "trainer/flags/test_fast_dev_run.py": "test_fast_dev_run.py",
    "trainer/flags/test_inference_mode.py": "test_inference_mode.py",
    "trainer/flags/test_limit_batches.py": "test_limit_batches.py",
    "trainer/flags/test_min_max_epochs.py": "test_min_max_epochs.py",
    "trainer/flags/test_overfit_batches.py": "test_overfit_batches.py",
    "trainer/flags/test_val_check_interval.py": "test_val_check_interval.py",
    "models/test_hooks.py": "test_hooks.py",
    "models/test_hparams.py": "test_hparams.py",
    "trainer/logging_/test_eval_loop_logging.py": "test_eval_loop_logging.py",
    "trainer/logging_/test_logger_connector.py": "test_logger_connector.py",
    "trainer/logging_/test_loop_logging.py": "test_loop_logging.py",
    "trainer/logging_/test_train_loop_logging.py": "test_train_loop_logging.py",
    # callbacks/test_early_stopping.py and test_lr_monitor.py are ported in callbacks/ (test_pl_*.py).
    "core/test_datamodules.py": "test_datamodules.py",
    "core/test_lightning_module.py": "test_lightning_module.py",
    "trainer/test_dataloaders.py": "test_dataloaders.py",
    "trainer/optimization/test_backward_calls.py": "test_backward_calls.py",
    "trainer/optimization/test_manual_optimization.py": "test_manual_optimization.py",
    "trainer/optimization/test_multiple_optimizers.py": "test_multiple_optimizers.py",
    "trainer/optimization/test_optimizers.py": "test_optimizers.py",
    "loops/test_evaluation_loop.py": "test_evaluation_loop.py",
    "loops/test_evaluation_loop_flow.py": "test_evaluation_loop_flow.py",
    "loops/test_training_loop.py": "test_training_loop.py",
    "loops/test_training_loop_flow_dict.py": "test_training_loop_flow_dict.py",
    "loops/test_training_loop_flow_scalar.py": "test_training_loop_flow_scalar.py",
    "loops/test_flow_warnings.py": "test_flow_warnings.py",
    "loops/test_prediction_loop.py": "test_prediction_loop.py",
    "loops/test_training_epoch_loop.py": "test_training_epoch_loop.py",
    "loops/test_all.py": "test_loops_all.py",
    "loops/test_loops.py": "test_loops.py",
    "loops/optimization/test_manual_loop.py": "test_manual_loop.py",
    "loops/optimization/test_automatic_loop.py": "test_automatic_loop.py",
    "trainer/test_states.py": "test_states.py",
    "checkpointing/test_checkpoint_callback_frequency.py": "test_checkpoint_callback_frequency.py",
    "checkpointing/test_trainer_checkpoint.py": "test_trainer_checkpoint.py",
    "trainer/test_trainer.py": "test_trainer.py",
    "trainer/properties/test_estimated_stepping_batches.py": "test_estimated_stepping_batches.py",
    "trainer/properties/test_get_model.py": "test_get_model.py",
    "trainer/properties/test_log_dir.py": "test_log_dir.py",
    "trainer/properties/test_loggers.py": "test_loggers.py",
    "trainer/dynamic_args/test_multiple_eval_dataloaders.py": "test_multiple_eval_dataloaders.py",
}

# Lightning's test helpers, ported beside the tests (imports swapped the same way).
HELPERS = {
    "src/lightning/pytorch/demos/boring_classes.py": "helpers/boring_classes.py",
    "tests/tests_pytorch/helpers/simple_models.py": "helpers/simple_models.py",
    "tests/tests_pytorch/helpers/datamodules.py": "helpers/datamodules.py",
    "tests/tests_pytorch/helpers/datasets.py": "helpers/datasets.py",
    "tests/tests_pytorch/helpers/deterministic_model.py": "helpers/deterministic_model.py",
    "tests/tests_pytorch/helpers/dataloaders.py": "helpers/dataloaders.py",
    "tests/tests_pytorch/helpers/utils.py": "helpers/utils.py",
}

# Test functions left out by name, with the reason (beyond the automatic rules above).
LEFT_OUT: dict[str, str] = {
    "test_trainer.py::test_trainer_config_device_ids": "mocks CUDA/MPS device counts (GPU selection)",
    "test_trainer.py::test_trainer_setup_call": "CLI-less Trainer.__new__ internals of Lightning's connectors",
    "test_trainer.py::test_trainer_calls_logger_finalize_on_exception": "patches Lightning's logger module",
    "test_trainer.py::test_detect_anomaly_nan": "torch anomaly mode is Lightning's connector detail",
    "test_dataloaders.py::test_dataloaders_with_limit_num_batches": "mocks CUDA device counts",
    "test_hooks.py::test_apply_batch_transfer_handler": "moves batches to a CUDA device",
    "test_hooks.py::test_transfer_batch_hook": "moves batches to a CUDA device",
    "test_trainer.py::test_setup_hook_device_and_layers": "needs a CUDA device",
}

# Lightning module -> fabricx module holding the same public names.
MODULES = {
    "lightning.pytorch": "fabricx.train",
    "lightning.pytorch.trainer": "fabricx.train",
    "lightning.pytorch.trainer.trainer": "fabricx.train",
    "lightning.pytorch.trainer.states": "fabricx.train",
    "lightning.pytorch.core": "fabricx.train",
    "lightning.pytorch.core.module": "fabricx.train",
    "lightning.pytorch.core.datamodule": "fabricx.train",
    "lightning.pytorch.core.optimizer": "fabricx.train",
    "lightning.pytorch.core.mixins": "fabricx.train",
    "lightning.pytorch.core.saving": "fabricx.train",
    "lightning.pytorch.utilities": "fabricx.train",
    "lightning.pytorch.utilities.combined_loader": "fabricx.train",
    "lightning.pytorch.utilities.model_helpers": "fabricx.train",
    "lightning.pytorch.utilities.types": "fabricx.utilities.types",
    "lightning.pytorch.utilities.data": "fabricx.train",
    "lightning.pytorch.tuner.tuning": "fabricx.train",
    "lightning.pytorch.callbacks": "fabricx.callbacks",
    "lightning.pytorch.callbacks.callback": "fabricx.callbacks",
    "lightning.pytorch.callbacks.early_stopping": "fabricx.callbacks",
    "lightning.pytorch.callbacks.finetuning": "fabricx.callbacks",
    "lightning.pytorch.callbacks.prediction_writer": "fabricx.callbacks",
    "lightning.pytorch.callbacks.on_exception_checkpoint": "fabricx.callbacks",
    "lightning.pytorch.callbacks.lr_monitor": "fabricx.callbacks",
    "lightning.pytorch.callbacks.model_checkpoint": "fabricx.callbacks",
    "lightning.pytorch.callbacks.progress": "fabricx.callbacks",
    "lightning.pytorch.loggers": "fabricx.loggers",
    "lightning.pytorch.loggers.logger": "fabricx.loggers",
    "lightning.pytorch.loggers.tensorboard": "fabricx.loggers",
    "lightning.pytorch.loggers.csv_logs": "fabricx.loggers",
    "lightning.pytorch.demos.boring_classes": "helpers.boring_classes",
    "lightning.pytorch.demos": "helpers.boring_classes",
    "lightning.pytorch.utilities.exceptions": "fabricx.utilities.exceptions",
    "lightning.fabric.utilities.exceptions": "fabricx.utilities.exceptions",
    "lightning.fabric.utilities.warnings": "fabricx.utilities.warnings",
    "lightning.pytorch.utilities.warnings": "fabricx.utilities.warnings",
    "lightning.fabric.utilities.seed": "fabricx.utilities.seed",
    "lightning.pytorch.accelerators": "fabricx.accelerators",
    "lightning.pytorch.strategies": "fabricx.strategies",
    "lightning.pytorch.profilers": "fabricx.utilities.profilers",
    "lightning.pytorch.profilers.simple": "fabricx.utilities.profilers",
    "lightning.fabric": "fabricx",
    # Lightning's requirement flags (_TORCHMETRICS_GREATER_EQUAL_0_11, ...): the same checks, in helpers/imports.py.
    "lightning.pytorch.utilities.imports": "helpers.imports",
    "lightning.fabric.utilities.imports": "helpers.imports",
    "lightning.fabric.plugins": "fabricx.checkpoint",
}
# Lightning names whose fabricx counterpart has another name (imported under Lightning's name).
RENAMES = {"LightningModule": "TrainModule", "LightningDataModule": "DataModule"}
# Where a name lives when MODULES's module does not hold it.
NAME_HOMES = {
    "seed_everything": "fabricx",
    "Callback": "fabricx.callbacks",
    "callbacks": "fabricx",
    "loggers": "fabricx",
    "__version__": "fabricx",
}
HELPER_MODULES = {
    "tests_pytorch.helpers": "helpers",
    "tests_pytorch.models.test_hooks": "test_hooks",
    "tests_pytorch.conftest": "conftest",
}
DROPPING_RUNIF = ("min_cuda_gpus", "mps=True", "tpu", "standalone", "deepspeed", "bf16_cuda", "sklearn=False")


def _is_lightning(module: str) -> bool:
    return module.split(".")[0] in ("lightning", "tests_pytorch")


def _git_show(mirror: str, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", mirror, "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def target_is_helper(module: str | None) -> bool:
    return module is not None and module.startswith("helpers.")


def _exports(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


class _Import:
    """One rewritten import: the replacement lines and the private names it binds."""

    def __init__(self, lines: list[str], private: set[str]) -> None:
        self.lines = lines
        self.private = private


def _rewrite_import(node: ast.ImportFrom | ast.Import) -> _Import | None:
    if isinstance(node, ast.Import):
        out, private = [], set()
        for alias in node.names:
            if not _is_lightning(alias.name):
                out.append(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
                continue
            bound = alias.asname or alias.name.split(".")[0]
            if alias.name.startswith("tests_pytorch.helpers."):
                out.append(f"import {alias.name.replace('tests_pytorch.', '')} as {bound}")
            elif alias.name in MODULES and not any(p.startswith("_") for p in alias.name.split(".")):
                out.append(f"import {MODULES[alias.name]} as {bound}")
            else:
                private.add(bound)
        return _Import(out, private)
    module = node.module or ""
    if not _is_lightning(module):
        return None
    out, private = [], set()
    for prefix, target in HELPER_MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            target_module = target + module[len(prefix) :]
            names = []
            for alias in node.names:
                if alias.name.startswith("_") and prefix != "tests_pytorch.helpers":
                    private.add(alias.asname or alias.name)
                else:
                    names.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
            if prefix == "tests_pytorch.conftest":
                private.update(alias.asname or alias.name for alias in node.names)
                names = []
            if names:
                out.append(f"from {target_module} import {', '.join(names)}")
            return _Import(out, private)
    home = MODULES.get(module)
    private_module = home is None or any(part.startswith("_") for part in module.split("."))
    public_lines = []
    for alias in node.names:
        bound = alias.asname or alias.name
        if target_is_helper(home):
            out.append(f"from {home} import {alias.name}" + (f" as {bound}" if bound != alias.name else ""))
            continue
        if private_module or (alias.name.startswith("_") and not alias.name.startswith("__")):
            private.add(bound)
            continue
        name = RENAMES.get(alias.name, alias.name)
        target = home
        if not _exports(target, name) and alias.name in NAME_HOMES:
            target = NAME_HOMES[alias.name]
        suffix = f" as {bound}" if bound != name else ""
        if _exports(target, name) or target.startswith("helpers"):
            out.append(f"from {target} import {name}{suffix}")
        else:
            public_lines.append(f'{bound} = public("{target}", "{name}")')
    if public_lines:
        out.append("from helpers.public import public")
        out.extend(public_lines)
    return _Import(out, private)


def _assigned_private_attrs(tree: ast.AST) -> set[str]:
    """Underscore attributes the file defines itself (its own classes' state and methods)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
            names.add(node.name)
        elif (  # hasattr(obj, "_name"): the file probes for a hook of its own, not a Lightning internal
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "hasattr"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            names.add(node.args[1].value)
    return names


def _private_use(node: ast.AST, own: set[str], private_names: set[str]) -> str | None:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            attr = sub.attr
            if attr.startswith("_") and not attr.startswith("__") and attr not in own:
                return f"Lightning-private attribute .{attr}"
        elif isinstance(sub, ast.Name) and sub.id in private_names:
            return f"Lightning-private name {sub.id}"
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and re.search(
            r"\blightning\.(pytorch|fabric)\.", sub.value
        ):
            return f"patches Lightning's module path {sub.value!r}"
    return None


def _runif_drop(node: ast.FunctionDef) -> str | None:
    for decorator in node.decorator_list:
        text = ast.unparse(decorator)
        if text.startswith("RunIf(") and any(key in text for key in DROPPING_RUNIF):
            return f"needs {text}"
    return None


def port_source(source: str, dest: str, report: dict[str, str]) -> str:
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, list[str], int]] = []  # (start, end, new lines, indent)
    private_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            rewritten = _rewrite_import(node)
            if rewritten is None:
                continue
            private_names |= rewritten.private
            indent = node.col_offset
            edits.append((node.lineno, node.end_lineno or node.lineno, rewritten.lines, indent))
    own = _assigned_private_attrs(tree)
    # Module-level helpers that use private names taint the tests that use them.
    tainted: set[str] = set(private_names)
    for node in tree.body:
        helper = isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("test")
        if helper and _private_use(node, own, private_names):
            tainted.add(node.name)
            # Only tests that are left out use it (they are dropped below): it goes too.
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])  # type: ignore[union-attr]
            edits.append((start, node.end_lineno or node.lineno, [], 0))
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.name.startswith("test"):
            continue
        key = f"{dest}::{node.name}"
        reason = LEFT_OUT.get(key) or _runif_drop(node) or _private_use(node, own, tainted)  # type: ignore[arg-type]
        if reason is None:
            continue
        report[key] = reason
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        edits.append((start, node.end_lineno or node.lineno, [], 0))
    # Apply bottom-up; an import inside a dropped test disappears with it.
    edits.sort(key=lambda e: (e[0], -e[1]))
    kept: list[tuple[int, int, list[str], int]] = []
    for edit in edits:
        inside_dropped = kept and kept[-1][2] == [] and kept[-1][0] <= edit[0] and edit[1] <= kept[-1][1]
        if not inside_dropped:
            kept.append(edit)
    for start, end, new, indent in reversed(kept):
        pad = " " * indent
        replacement = [pad + line + "\n" for line in new]
        if not new and indent:
            replacement = [pad + "pass\n"]
        lines[start - 1 : end] = replacement
    header = f"# Lightning {TAG}'s test with its imports swapped by port.py (run it to regenerate this file).\n"
    return header + "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default=MIRROR)
    parser.add_argument("--tag", default=TAG)
    args = parser.parse_args()
    report: dict[str, str] = {}
    for src, dest in HELPERS.items():
        text = port_source(_git_show(args.mirror, args.tag, src), dest, {})
        (HERE / dest).write_text(text)
    for src, dest in FILES.items():
        text = port_source(_git_show(args.mirror, args.tag, f"tests/tests_pytorch/{src}"), dest, report)
        if "\ndef test" not in text:  # every test of the file is left out
            (HERE / dest).unlink(missing_ok=True)
            continue
        (HERE / dest).write_text(text)
    lines = ["# Generated by port.py: test functions left out of the port, with the rule that left each out.\n"]
    lines.append("LEFT_OUT = {\n")
    lines.extend(f"    {key!r}: {reason!r},\n" for key, reason in sorted(report.items()))
    lines.append("}\n")
    (HERE / "left_out.py").write_text("".join(lines))
    # The imports only the left-out tests used, and import order (ruff's own fixes, nothing else).
    ruff = Path(sys.executable).parent / "ruff"
    subprocess.run([str(ruff), "check", "--fix", "--select", "F401,I001", "--quiet", str(HERE)], check=False)
    print(f"ported {len(FILES)} files; {len(report)} test functions left out (left_out.py)")


if __name__ == "__main__":
    main()
