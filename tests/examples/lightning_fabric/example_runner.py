"""Runs several of Lightning's ``examples/fabric`` scripts one after another in this process, through Lightning
Fabric or through fabricx, and records what each did.

Usage: ``python example_runner.py FRAMEWORK OUT_DIR EXAMPLE [EXAMPLE ...]`` (also under ``fabric run`` /
``fabricx run``, one record file per rank). For fabricx only the script's imports change (``lightning.fabric`` and
``lightning`` become ``fabricx``). The data sources are stand-ins (``stand_ins/``) and the sizes are shrunk through
the scripts' own knobs: command-line flags, module-level settings, function defaults, and (for the 4-GPU
tensor-parallel script) forced constructor arguments. Their training code runs as shipped.

For every example the record holds the printed lines, after every optimizer step a digest of the bytes of that
optimizer's parameters (so two records agree only where the weights are bit for bit the same), and the paths the
example wrote (two levels deep).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

HERE = Path(__file__).parent

# name -> (vendored script, how to run it)
EXAMPLES: dict[str, dict[str, Any]] = {
    "image_classifier": {
        "file": "image_classifier_train_fabric.py",
        "argv": ["--epochs=2", "--batch-size=16", "--log-interval=2", "--lr=0.5"],
    },
    "kfold_cv": {
        "file": "kfold_cv_train_fabric.py",
        "argv": ["--epochs=1", "--folds=2", "--batch-size=16", "--log-interval=1", "--lr=0.5"],
    },
    "language_model": {
        "file": "language_model_train.py",
        "call": "main",
        "defaults": {"train": {"max_epochs": 1}},
    },
    "reinforcement_learning": {
        "file": "rl_example/train_fabric.py",
        "package": "rl_example/rl",  # copied (imports rewritten) into the work directory, imported as `rl`
        "argv": [
            "--num-envs=2",
            "--num-steps=16",
            "--total-timesteps=64",
            "--update-epochs=2",
            "--per-rank-batch-size=16",
        ],
    },
    "tensor_parallel": {
        "file": "tp_example/train.py",
        "modules": ["tp_example/data.py", "tp_example/model.py", "tp_example/parallelism.py"],
        "call": "train",
        "seed": 0,  # the script seeds nothing; both runs start from the same global generator state
        # The script asks for 4 GPUs (2 x 2 mesh) and a 4096-wide model: on CPU, tensor parallelism over the two
        # processes and a small model (the dataset's vocabulary follows `model_args.vocab_size`).
        "force": {
            "L.Fabric": {"accelerator": "cpu", "devices": 2},
            "ModelParallelStrategy": {"data_parallel_size": 1, "tensor_parallel_size": 2},
            "ModelArgs": {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "multiple_of": 16},
        },
    },
    "build_your_own_trainer": {
        "file": "byot_example/run.py",
        "modules": ["byot_example/trainer.py"],
        "call": "train(MNISTModule())",  # the script's `if __name__ == "__main__":` line
        "seed": 0,  # the script seeds nothing (torch's own start-up seed differs from run to run)
        # The example was written against older releases; three of its lines fail on the installed ones, the same
        # way for both frameworks, so both runs get the same repair (the vendored files stay as shipped):
        "repairs": {
            "byot_example/run.py": {
                # torch 2.13's ReduceLROnPlateau has no `verbose` any more (TypeError).
                'mode="max", verbose=True)': 'mode="max")',
                # The trainer's parser reads a dict as a scheduler configuration only, so the shipped dict (with an
                # "optimizer" key) gives no optimizer and `fit` stops at `assert optimizer is not None`; the
                # (optimizer, scheduler configuration) pair it does parse carries the same settings.
                'return {\n            "optimizer": optim,\n': "return optim, {\n",
            },
        },
        # lightning 2.6.6 has no `lightning.fabric.utilities.types.LRScheduler`, which trainer.py's annotations
        # name at import: for the Lightning run it is set to torch's class (what the example means by it).
        "lightning_shims": {
            "lightning.fabric.utilities.types": {"LRScheduler": "torch.optim.lr_scheduler.LRScheduler"},
        },
        "force": {"torch.utils.data.DataLoader": {"num_workers": 0}},  # the script starts 4 loader workers
        # On several processes the trainer (which asks for accelerator="auto", devices="auto") gets CPU DDP
        # explicitly, through the arguments it passes on to its Fabric (see `_devices`).
        "force_distributed": {"MyCustomTrainer": {"accelerator": "cpu", "strategy": "ddp", "devices": "WORLD_SIZE"}},
        # Lightning 2.6.6's private `_unwrap_objects` returns the DDP wrapper under DDP (it unwraps to the module that
        # runs forward), so `is_overridden` finds no LightningModule and raises "Expected a parent": on several
        # processes the example fails on Lightning itself. For the Lightning run only, the trainer asks the Fabric
        # module for the user's module instead (`.module`, Lightning's public way); fabricx's run is unchanged, its
        # `unwrap` returns the user's module under DDP too.
        "lightning_repairs_distributed": {"byot_example/trainer.py": {"_unwrap_objects(model)": "model.module"}},
    },
    "dcgan": {
        "file": "dcgan_train_fabric.py",
        "call": "main",
        "settings": {"workers": 0, "batch_size": 4, "num_epochs": 1, "ngf": 8, "ndf": 8, "nz": 16},
    },
}

_DATA_SOURCES = {"from lightning.pytorch.demos import": "from demos_standin import"}
_FABRIC_IMPORTS = {
    # Lightning's private unwrap helper: fabricx's public `unwrap` does the same for one object.
    "from lightning.fabric.wrappers import _unwrap_objects": "from fabricx import unwrap as _unwrap_objects",
    "from lightning.pytorch.utilities.model_helpers import is_overridden": "from fabricx.train import is_overridden",
    "from lightning.fabric import": "from fabricx import",
    "from lightning.fabric.": "from fabricx.",
    "import lightning as L": "import fabricx as L",
    "from lightning.pytorch import LightningModule": "from fabricx.train import TrainModule as LightningModule",
}
# Names reached through `import lightning as L` (now `import fabricx as L`): `lightning.fabric.X` is `fabricx.X`, as
# in the imports above, and a LightningModule is a TrainModule.
_FABRIC_NAMES = {r"\bL\.fabric\.": "L.", r"\bL\.LightningModule\b": "L.TrainModule"}


def source_for(framework: str, file: str, repairs: dict[str, str] | None = None) -> str:
    """The example's text as ``framework`` runs it: ``repairs`` made, data sources swapped for stand-ins, imports
    (and the names reached through ``L``) changed for fabricx."""
    text = (HERE / file).read_text()
    for old, new in (repairs or {}).items():
        assert old in text, f"{file}: the repaired text {old!r} is not there any more"
        text = text.replace(old, new)
    for old, new in _DATA_SOURCES.items():
        text = text.replace(old, new)
    if framework == "fabricx":
        for old, new in _FABRIC_IMPORTS.items():
            text = text.replace(old, new)
        for pattern, new in _FABRIC_NAMES.items():
            text = re.sub(pattern, new, text)
        leftover = re.findall(r"^\s*(?:from|import) lightning\b.*$", text, re.M)
        assert not leftover, f"{file} still imports lightning: {leftover}"
    return text


def _digest(optimizer: torch.optim.Optimizer) -> str:
    hasher = hashlib.sha256()
    for group in optimizer.param_groups:
        for param in group["params"]:
            local = param.detach()
            local = local.to_local() if hasattr(local, "to_local") else local  # this rank's shard of a DTensor
            hasher.update(local.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return hasher.hexdigest()[:20]


def _forcing(factory: Any, forced: dict[str, Any]) -> Any:
    """``factory`` called with ``forced`` keyword arguments replacing whatever the script passes."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return factory(*args, **{**kwargs, **forced})

    return call


class _Overlay:
    """A module seen through a few replaced attributes (``L.Fabric`` with forced arguments)."""

    def __init__(self, module: Any, replaced: dict[str, Any]) -> None:
        self._module, self._replaced = module, replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced[name] if name in self._replaced else getattr(self._module, name)


def _overlay_path(module: Any, path: list[str], forced: dict[str, Any]) -> _Overlay:
    """``module`` with ``module.a.b.name`` (``path``) replaced by the forcing factory."""
    head, *rest = path
    inner = getattr(module, head)
    return _Overlay(module, {head: _overlay_path(inner, rest, forced) if rest else _forcing(inner, forced)})


def _apply_forced(namespace: dict[str, Any], force: dict[str, dict[str, Any]]) -> None:
    for target, forced in force.items():
        first, *path = target.split(".")
        namespace[first] = _overlay_path(namespace[first], path, forced) if path else _forcing(namespace[first], forced)


def _apply_shims(shims: dict[str, dict[str, str]]) -> list[tuple[Any, str]]:
    """Sets each missing ``module.name`` to the object a dotted path names; returns what to delete afterwards."""
    added = []
    for module_name, names in shims.items():
        module = importlib.import_module(module_name)
        for name, target in names.items():
            if not hasattr(module, name):
                owner, _, attribute = target.rpartition(".")
                setattr(module, name, getattr(importlib.import_module(owner), attribute))
                added.append((module, name))
    return added


def _devices() -> int:
    """The process count: ``FABRICX_EXAMPLE_DEVICES`` (for a script whose own ``launch()`` starts the other ranks,
    run with plain ``python``), else the launcher's ``WORLD_SIZE``."""
    return int(os.environ.get("FABRICX_EXAMPLE_DEVICES") or os.environ.get("WORLD_SIZE", "1"))


def _with_devices(force: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``force`` with each ``"WORLD_SIZE"`` value replaced by the process count."""
    return {
        target: {key: _devices() if value == "WORLD_SIZE" else value for key, value in forced.items()}
        for target, forced in force.items()
    }


def _set_default(function: Any, name: str, value: Any) -> None:
    """Sets the default of ``function``'s keyword ``name`` (the example's own knob, e.g. ``max_epochs``)."""
    code = function.__code__
    names = code.co_varnames[: code.co_argcount]
    defaults = list(function.__defaults__)
    defaults[names.index(name) - (len(names) - len(defaults))] = value
    function.__defaults__ = tuple(defaults)


def run_example(framework: str, name: str, workdir: Path) -> dict[str, Any]:
    spec = EXAMPLES[name]
    steps: list[str] = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: steps.append(_digest(opt)))
    repairs = dict(spec.get("repairs", {}))
    if framework == "lightning" and _devices() > 1:
        for file, replaced in spec.get("lightning_repairs_distributed", {}).items():
            repairs[file] = {**repairs.get(file, {}), **replaced}
    code = compile(source_for(framework, spec["file"], repairs.get(spec["file"])), str(HERE / spec["file"]), "exec")
    namespace: dict[str, Any] = {"__name__": "__main__" if "argv" in spec else f"example_{name}"}
    namespace["__file__"] = str(HERE / spec["file"])
    printed = io.StringIO()
    workdir.mkdir(parents=True, exist_ok=True)
    previous_cwd, previous_argv = Path.cwd(), sys.argv
    for module_file in spec.get("modules", []):  # the script's own flat modules (``from model import ...``)
        (workdir / Path(module_file).name).write_text(source_for(framework, module_file, repairs.get(module_file)))
    flat = [Path(module_file).stem for module_file in spec.get("modules", [])]
    if flat:
        sys.path.insert(0, str(workdir))
    package = spec.get("package")
    if package is not None:
        target = workdir / Path(package).name
        target.mkdir(exist_ok=True)
        for module in sorted((HERE / package).glob("*.py")):
            (target / module.name).write_text(source_for(framework, f"{package}/{module.name}"))
        sys.path.insert(0, str(workdir))
    os.chdir(workdir)
    if "argv" in spec:  # the script parses its flags; a script called as a function sees the runner's own command
        sys.argv = [spec["file"], *spec["argv"]]  # line, so a `fabric.launch()` that re-runs it starts the runner
    shimmed = _apply_shims(spec.get("lightning_shims", {})) if framework == "lightning" else []
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
            if "call" in spec:
                namespace.update(spec.get("settings", {}))
                _apply_forced(namespace, spec.get("force", {}))
                if _devices() > 1:
                    _apply_forced(namespace, _with_devices(spec.get("force_distributed", {})))
                if "seed" in spec:
                    torch.manual_seed(spec["seed"])
                for function, values in spec.get("defaults", {}).items():
                    for key, value in values.items():
                        _set_default(namespace[function], key, value)
                call = spec["call"]
                if "(" in call:  # a call expression, e.g. the script's own `train(MNISTModule())`
                    eval(call, namespace)
                else:
                    namespace[call]()
    finally:
        if flat:
            sys.path.remove(str(workdir))
            for loaded in flat:
                sys.modules.pop(loaded, None)
        if package is not None:
            sys.path.remove(str(workdir))
            prefix = Path(package).name
            for loaded in [key for key in sys.modules if key == prefix or key.startswith(prefix + ".")]:
                del sys.modules[loaded]
        for module, name in shimmed:
            delattr(module, name)
        handle.remove()
        os.chdir(previous_cwd)
        sys.argv = previous_argv
    sys.stdout.write(printed.getvalue())
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    written = sorted(str(path.relative_to(workdir)) for path in [*workdir.glob("*"), *workdir.glob("*/*")])
    return {"printed": lines, "steps": steps, "written": written, "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    sys.argv[0] = str(Path(sys.argv[0]).resolve())  # the examples run in their own directories
    framework, out_dir, names = sys.argv[1], Path(sys.argv[2]).resolve(), sys.argv[3:]
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
    records = {name: run_example(framework, name, out_dir / f"{framework}-work-{rank}" / name) for name in names}
    (out_dir / f"{framework}-rank{rank}.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
