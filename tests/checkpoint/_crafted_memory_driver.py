"""Helper process for the memory bound of crafted checkpoints (see test_ckpt_memory_bound.py).

``python _crafted_memory_driver.py FOLDER SEED COUNT`` writes real checkpoints of every layout into FOLDER,
derives COUNT crafted copies per layout from them with ``random.Random(SEED)`` (each under 1 MiB), and loads
each in a forked child whose address space may grow by 64 MiB at most (``RLIMIT_AS``) and which has 20 s;
after a load that works, the child copies every tensor it restored (as a training step reads them).
A load may work or raise `CheckpointError`; anything else (an allocation refused by the limit, another
exception, a signal, a timeout) is printed as ``FAIL <layout> <case> <what>``. The last line is
``DONE <cases tried> <failures>``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import resource
import shutil
import signal
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

torch.set_num_threads(1)

from fabricx import Fabric  # noqa: E402
from fabricx.utilities.exceptions import CheckpointError  # noqa: E402

LIMIT = 64 * 2**20
MAX_FILE = 2**20


def _objects(fabric: Fabric) -> dict[str, Any]:
    model = nn.Linear(8, 8)
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = fabric.setup(model, optimizer)
    return {"model": model, "optimizer": optimizer, "step": 0}


def _huge(rng: random.Random) -> int:
    return rng.choice([2**24, 2**26, 2**28, 2**31, 2**40])


# ------------------------------------------------------------------------------------------- torch files


def _expanded(rng: random.Random) -> torch.Tensor:
    if rng.random() < 0.5:
        return torch.zeros(1).expand(_huge(rng))
    side = rng.choice([2**12, 2**14, 2**16])
    return torch.zeros(2 * side).as_strided((side, side), (rng.choice([0, 1]), 1))  # rows share bytes


def _leaves(value: Any, trail: tuple = ()) -> list[tuple]:
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _leaves(item, (*trail, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found += _leaves(item, (*trail, index))
    else:
        found.append(trail)
    return found


def _get(root: Any, trail: tuple) -> Any:
    for key in trail:
        root = root[key]
    return root


def _set(root: Any, trail: tuple, value: Any) -> None:
    node = root
    for key in trail[:-1]:
        node = node[key]
    if isinstance(node, tuple):
        return
    node[trail[-1]] = value


def _mutate_contents(contents: dict, rng: random.Random) -> dict:
    leaves = [t for t in _leaves(contents) if t]
    tensors = [t for t in leaves if isinstance(_get(contents, t), torch.Tensor)] or leaves
    for _ in range(rng.randint(1, 3)):
        trail = rng.choice(tensors if rng.random() < 0.7 else leaves)  # mostly what a load allocates for
        kind = rng.random()
        if kind < 0.5:
            value: Any = _expanded(rng)
        elif kind < 0.65:
            value = {"__fabricx_numpy__": torch.zeros(3), "shape": [_huge(rng), _huge(rng)]}
        elif kind < 0.8:
            nested: Any = 0
            for _ in range(rng.choice([60, 300, 600])):
                nested = [nested]
            value = nested
        else:
            value = torch.zeros(rng.choice([16, 4096, 2**16]))  # real bytes, wrong shape
        _set(contents, trail, value)
    return contents


def _deflated(path: Path, rng: random.Random) -> None:
    """Rewrite the zip ``path`` with its records compressed, and a record of zeros that inflates to 96-128 MiB."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as target:
        names = source.namelist()
        for name in names:
            data = source.read(name)
            if name.endswith("/data/0"):
                data = bytes(rng.choice([96, 128]) * 2**20)
            target.writestr(name, data)
    path.write_bytes(buffer.getvalue())


def _crafted_torch_file(real: Path, target: Path, rng: random.Random, extra_globals: bool = False) -> None:
    contents = torch.load(real, weights_only=not extra_globals)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)  # writing the nested values; the loads run with the default limit
    try:
        torch.save(_mutate_contents(contents, rng), target)
    finally:
        sys.setrecursionlimit(limit)
    if rng.random() < 0.3:
        _deflated(target, rng)


# ------------------------------------------------------------------------------------------------ layouts


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy(source, target)


def _single_file(real: Path, target: Path, rng: random.Random) -> None:
    _crafted_torch_file(real, target, rng)


def _directory(real: Path, target: Path, rng: random.Random) -> None:
    _copy(real, target)
    document = json.loads((target / "shared.json").read_text())
    nodes: list[dict] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "shape" in value:
                nodes.append(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(document)
    for node in rng.sample(nodes, k=min(len(nodes), rng.randint(1, 3))):
        node["shape"] = [_huge(rng)]
        if rng.random() < 0.7:
            node.update(stride=[0], offset=0)
    text = json.dumps(document)
    if rng.random() < 0.2:  # a root nested thousands of lists deep
        depth = rng.choice([500, 5000, 100000])
        text = text.replace('"root": ', '"root": ' + "[" * depth + "0" + "]" * depth + ', "was": ', 1)
    (target / "shared.json").write_text(text)
    meta = json.loads((target / "meta.json").read_text())
    meta["files"]["shared.json"] = len(text)
    (target / "meta.json").write_text(json.dumps(meta))


def _dcp(real: Path, target: Path, rng: random.Random) -> None:
    _copy(real, target)
    if rng.random() < 0.35:
        _crafted_torch_file(real / "meta.pt", target / "meta.pt", rng)
        return
    metadata = pickle.loads((real / ".metadata").read_bytes())
    choice = rng.random()
    if choice < 0.4:
        levels = [2**16 - 1] * rng.choice([8, 30, 60])
        metadata.planner_data = {k: (v[0], i, *levels, "x") for i, (k, v) in enumerate(metadata.planner_data.items())}
    elif choice < 0.7:
        for entry in metadata.state_dict_metadata.values():
            if hasattr(entry, "size"):
                entry.size = torch.Size([_huge(rng)])
                for chunk in entry.chunks:
                    chunk.sizes = torch.Size([_huge(rng)])
                    chunk.offsets = torch.Size([0])
    else:
        for info in metadata.storage_data.values():
            info.length = _huge(rng)
    (target / ".metadata").write_bytes(pickle.dumps(metadata))


def _deepspeed(real: Path, target: Path, rng: random.Random) -> None:
    _copy(real, target)
    files = sorted((target / "checkpoint").glob("*.pt"))
    victim = rng.choice(files)
    _crafted_torch_file(victim, victim, rng, extra_globals=True)


def _deepspeed_original(folder: Path) -> Path:
    tag = folder / "checkpoint"
    tag.mkdir(parents=True)
    weight, bias = torch.randn(8, 8), torch.randn(8)
    common = {"buffer_names": [], "ds_version": "0.19.8", "dp_world_size": 1, "mp_world_size": 1}
    torch.save({**common, "module": {}, "param_shapes": [{"weight": weight.shape, "bias": bias.shape}],
                "shared_params": {}, "frozen_param_shapes": None, "frozen_param_fragments": None,
                "ds_config": {"zero_optimization": {"stage": 2}}},
               tag / "zero_pp_rank_0_mp_rank_00_model_states.pt")  # fmt: skip
    torch.save({"optimizer_state_dict": {"zero_stage": 2, "partition_count": 1,
                                         "single_partition_of_fp32_groups": [torch.cat([weight.flatten(), bias])]}},
               tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")  # fmt: skip
    return folder


# ---------------------------------------------------------------------------------------------- the trial


def _in_child(load: Callable[[], Any]) -> str:
    """Run ``load`` in a forked child under the address-space limit; ``ok``, ``refused`` or what went wrong."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        outcome = "ok"
        try:
            with open("/proc/self/status") as status:
                size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
            resource.setrlimit(resource.RLIMIT_AS, (size + LIMIT, resource.RLIM_INFINITY))
            signal.alarm(20)
            load()
        except CheckpointError:
            outcome = "refused"
        except BaseException as error:
            outcome = f"{type(error).__name__}: {str(error)[:160]}".replace("\n", " ")
        os.write(write, outcome.encode()[:400])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return said or "no outcome"


def _use(state: dict[str, Any]) -> None:
    """Copy every tensor a load restored, as a training step reads them whole."""
    optimizer = state.get("optimizer")
    held = list(state["model"].state_dict().values())
    held += [value for entry in (optimizer.state.values() if optimizer else ()) for value in entry.values()]
    for tensor in held:
        if isinstance(tensor, torch.Tensor):
            tensor.clone()


def main() -> None:
    folder, seed, count = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    fabric = Fabric(accelerator="cpu", devices=1)
    state = _objects(fabric)
    state["model"](torch.ones(2, 8)).sum().backward()
    state["optimizer"].step()
    originals = {
        "single_file": folder / "real.pth",
        "directory": folder / "real_dir",
        "dcp": folder / "real_dcp",
        "deepspeed": folder / "real_ds",
    }
    fabric.save(originals["single_file"], state)
    fabric.save(originals["directory"], state)
    fabric.save(originals["dcp"], state, layout="dcp")
    _deepspeed_original(originals["deepspeed"])
    crafters = {"single_file": _single_file, "directory": _directory, "dcp": _dcp, "deepspeed": _deepspeed}
    try:  # imported before the limit: the children measure loading, not DeepSpeed's import
        import deepspeed.utils.zero_to_fp32  # noqa: F401
    except ImportError:
        del crafters["deepspeed"]
    rng = random.Random(seed)
    tried = failures = 0
    for layout, craft in crafters.items():
        for case in range(count):
            target = folder / f"{layout}_{case}{'.pth' if layout == 'single_file' else ''}"
            began = time.perf_counter()
            craft(originals[layout], target, rng)
            crafted = time.perf_counter()
            size = (
                sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
                if target.is_dir()
                else target.stat().st_size
            )
            assert size < MAX_FILE, (layout, case, size)

            def load(path: Path = target, layout: str = layout) -> None:
                into = (
                    {"model": nn.Linear(8, 8)}
                    if layout == "deepspeed"
                    else _objects(Fabric(accelerator="cpu", devices=1))
                )
                Fabric(accelerator="cpu", devices=1).load(path, into)
                _use(into)

            outcome = _in_child(load)
            if os.environ.get("CRAFTED_MEMORY_TIMES"):
                took = f"craft {crafted - began:.2f}s load {time.perf_counter() - crafted:.2f}s"
                print(f"{layout} {case}: {took} {outcome[:60]}")
            tried += 1
            if outcome not in ("ok", "refused"):
                failures += 1
                print(f"FAIL {layout} {case} {outcome}", flush=True)
    print(f"DONE {tried} {failures}", flush=True)


if __name__ == "__main__":
    main()
