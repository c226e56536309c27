"""Run Accelerate's own test scripts (from the installed ``accelerate`` package) with the Accelerator
side taken from fabricx, and record every case.

Usage (one process, or under ``fabricx run --devices 2``)::

    python run_scripts.py OUT_DIR test_ops test_sync test_script external_deps/test_metrics

Before a script is imported, the names it takes from Accelerate for the Accelerator side
(``Accelerator``, ``DataLoaderConfiguration``, ``GradientAccumulationPlugin``, ``PartialState``,
``AcceleratorState``, ``GradientState``, ``DistributedType``, ``set_seed``, the collective operations,
``prepare_data_loader`` and ``SeedableRandomSampler``) are pointed at fabricx's. Everything else (the
regression model and dataset, ``are_the_same_tensors``, the assertions) stays Accelerate's.

A case is one call, from the script's ``main()``, of one of its ``test_*``/``*_check``/``check_*``
functions; a failing case is recorded and the script goes on with the next. Scripts end with
``destroy_process_group()``; when several run in one launch that is done once, after the last.
Writes ``OUT_DIR/rank_<r>.json``: ``{case: "passed" | "failed: ..."}``.

``local:NAME`` runs ``NAME.py`` beside this file instead (``ported_test_sync``: Accelerate's script with its
imports swapped; ``surface_checks``); it may record values in a ``FINAL_PARAMETERS`` dict, written to
``OUT_DIR/parameters_<r>.json``.
With ``ACCELERATE_SUITE_PEER=1`` in the environment nothing is swapped: the scripts run on Accelerate itself,
the peer's side of a differential test.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

import accelerate
import accelerate.accelerator
import accelerate.data_loader
import accelerate.state
import accelerate.utils
import accelerate.utils.dataclasses
import accelerate.utils.operations
import torch
import torch.distributed as dist

from fabricx.compat import accelerate as fx
from fabricx.compat.accelerate import ops as ops
from fabricx.compat.accelerate.sharding import SeedableRandomSampler

SCRIPTS = Path(accelerate.__file__).parent / "test_utils" / "scripts"
HERE = Path(__file__).resolve().parent
PEER = os.environ.get("ACCELERATE_SUITE_PEER") == "1"

_SWAPS: dict[Any, dict[str, Any]] = {
    accelerate: {
        "Accelerator": fx.Accelerator,
        "DataLoaderConfiguration": fx.DataLoaderConfiguration,
        "GradientAccumulationPlugin": fx.GradientAccumulationPlugin,
        "PartialState": fx.PartialState,
        "AcceleratorState": fx.AcceleratorState,
        "DistributedType": fx.DistributedType,
        "ProjectConfiguration": fx.ProjectConfiguration,
        "skip_first_batches": fx.skip_first_batches,
    },
    accelerate.accelerator: {
        "Accelerator": fx.Accelerator,
        "DataLoaderConfiguration": fx.DataLoaderConfiguration,
        "GradientAccumulationPlugin": fx.GradientAccumulationPlugin,
    },
    accelerate.state: {
        "PartialState": fx.PartialState,
        "AcceleratorState": fx.AcceleratorState,
        "GradientState": fx.GradientState,
    },
    accelerate.utils: {
        "DataLoaderConfiguration": fx.DataLoaderConfiguration,
        "GradientAccumulationPlugin": fx.GradientAccumulationPlugin,
        "DistributedType": fx.DistributedType,
        "set_seed": fx.set_seed,
        "gather": ops.gather,
        "gather_object": ops.gather_object,
        "broadcast": ops.broadcast,
        "reduce": ops.reduce,
        "pad_across_processes": ops.pad_across_processes,
        "synchronize_rng_states": ops.synchronize_rng_states,
    },
    accelerate.utils.dataclasses: {
        "DataLoaderConfiguration": fx.DataLoaderConfiguration,
        "GradientAccumulationPlugin": fx.GradientAccumulationPlugin,
        "DistributedType": fx.DistributedType,
    },
    accelerate.utils.operations: {
        name: getattr(ops, name)
        for name in (
            "DistributedOperationException",
            "broadcast",
            "copy_tensor_to_devices",
            "gather",
            "gather_object",
            "pad_across_processes",
            "reduce",
        )
    },
    accelerate.data_loader: {
        "prepare_data_loader": fx.prepare_data_loader,
        "SeedableRandomSampler": SeedableRandomSampler,
    },
}


def install_shim() -> None:
    for module, names in _SWAPS.items():
        for name, value in names.items():
            setattr(module, name, value)


def _stub_modules_for_metrics() -> list[str]:
    """test_metrics imports ``datasets`` and ``evaluate`` at the top but uses them only in its GPU-only
    MRPC cases (which download a model and data); give it empty stand-ins when they are missing."""
    added = []
    for name in ("datasets", "evaluate"):
        if importlib.util.find_spec(name) is None:
            stub = types.ModuleType(name)
            stub.load_dataset = None  # type: ignore[attr-defined]
            logging_stub = types.SimpleNamespace(set_verbosity_warning=lambda: None, set_verbosity_error=lambda: None)
            stub.utils = types.SimpleNamespace(logging=logging_stub)  # type: ignore[attr-defined]
            sys.modules[name] = stub
            added.append(name)
    return added


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    plain = [repr(a) for a in args if isinstance(a, bool | int | float | str | type(None))]
    plain += [f"{k}={v!r}" for k, v in kwargs.items() if isinstance(v, bool | int | float | str | type(None))]
    return f"({', '.join(plain)})" if plain else ""


def run_script(relative: str, results: dict[str, str], parameters: dict[str, Any] | None = None) -> None:
    """Run one script; ``name@exact_window`` runs it with fabricx's opt-in scaling of a short last window
    (``FABRICX_ACCELERATE_EXACT_WINDOW_SCALING=1``)."""
    relative, _, variant = relative.partition("@")
    if variant:
        os.environ["FABRICX_ACCELERATE_EXACT_WINDOW_SCALING"] = "1"
        try:
            scoped: dict[str, str] = {}
            run_script(relative, scoped)
            results.update({f"{key} [{variant}]": value for key, value in scoped.items()})
        finally:
            del os.environ["FABRICX_ACCELERATE_EXACT_WINDOW_SCALING"]
        return
    if relative.startswith("local:"):
        relative = relative.removeprefix("local:")
        path = HERE / f"{relative}.py"
        module_name = relative
    else:
        path = SCRIPTS / f"{relative}.py"
        module_name = "accelerate.test_utils.scripts." + relative.replace("/", ".")
    added = _stub_modules_for_metrics() if "metrics" in relative else []
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    script = Path(relative).name
    depth = [0]

    def record(name: str, function: Any) -> Any:
        def case(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return function(*args, **kwargs)
            key = f"{script}::{name}{_describe(args, kwargs)}"
            count = 2
            while key in results:
                key = f"{script}::{name}{_describe(args, kwargs)}#{count}"
                count += 1
            depth[0] += 1
            print(f"[case {os.environ.get('RANK', 0)}] {key}", file=sys.stderr, flush=True)
            try:
                function(*args, **kwargs)
                results[key] = "passed"
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # a failing case is recorded (pytest.fail too); the script goes on
                where = traceback.extract_tb(error.__traceback__)[-1]
                results[key] = f"failed: {type(error).__name__}: {str(error)[:300]} (at {where.name}:{where.lineno})"
            finally:
                depth[0] -= 1
            return None

        return case

    for name, value in list(vars(module).items()):
        is_case = name.startswith(("test_", "check_")) or name.endswith("_check")
        if is_case and isinstance(value, types.FunctionType) and value.__module__ == module_name:
            setattr(module, name, record(name, value))
    try:
        module.main()
    except Exception as error:
        results[f"{script}::main"] = f"failed: {type(error).__name__}: {str(error)[:300]}"
    finally:
        for name in added:
            sys.modules.pop(name, None)
    if parameters is not None:
        parameters.update(getattr(module, "FINAL_PARAMETERS", {}))


def main() -> None:
    out_dir = Path(sys.argv[1])
    # A rank stuck in a collective prints where every thread is and exits, so the launch fails with the place
    # instead of the caller's timeout killing it silently.
    if hang_seconds := int(os.environ.get("ACCELERATE_SUITE_HANG_SECONDS", "0")):
        faulthandler.dump_traceback_later(hang_seconds, exit=True)
    torch.set_num_threads(1)
    if not PEER:
        install_shim()
    real_destroy = dist.destroy_process_group
    dist.destroy_process_group = lambda group=None: None  # once, after the last script
    results: dict[str, str] = {}
    parameters: dict[str, Any] = {}
    try:
        for relative in sys.argv[2:]:
            run_script(relative, results, parameters)
    finally:
        dist.destroy_process_group = real_destroy
    rank = int(os.environ.get("RANK", 0))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"rank_{rank}.json").write_text(json.dumps(results, indent=1))
    (out_dir / f"parameters_{rank}.json").write_text(json.dumps(parameters))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
