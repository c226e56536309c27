"""Untrusted checkpoints through ``Fabric.load``: refused with an error naming the file and the problem,
never running code.

tests/checkpoint/ covers the reader alone (crafted pickles, truncation, random bytes, version, fuzzing).
Here the whole path is exercised: reading *and* restoring into live objects, where a file that is
well-formed can still hold tensors of the wrong shape or dtype, or missing and unexpected keys.
The documented contract: ``Fabric.load`` raises :class:`CheckpointError` for anything wrong with
the file or anything in it that does not fit the objects (a missing entry is also a ``KeyError``).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.checkpoint import read_checkpoint, write_checkpoint
from fabricx.utilities.exceptions import CheckpointError

FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _objects(fabric: Fabric, net: nn.Module | None = None) -> dict:
    model = net if net is not None else _net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    model, optimizer = fabric.setup(model, optimizer)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4, shuffle=True))
    return {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}


@pytest.fixture(autouse=True)
def _keep_global_random_state():
    # Loading restores (possibly mutated) random states into this process: put them back afterwards.
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    yield
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real checkpoint of model, optimizer (with state), data loader (mid-epoch) and a step count."""
    root = tmp_path_factory.mktemp("real")
    fabric = Fabric(accelerator="cpu")
    state = _objects(fabric)
    iterator = iter(state["loader"])
    for _ in range(2):
        x, y = next(iterator)
        fabric.backward(nn.functional.mse_loss(state["model"](x), y))
        state["optimizer"].step()
        state["optimizer"].zero_grad()
    state["step"] = 2
    fabric.save(root / "ckpt", state)
    loaded = read_checkpoint(root / "ckpt")
    return root / "ckpt", loaded.shared, loaded.per_rank


def _crafted(directory: Path, shared: dict, per_rank: dict | None) -> Path:
    """A well-formed checkpoint (written by fabricx itself) with contents chosen by the test."""
    path = directory / "crafted"
    write_checkpoint(path, shared, per_rank)
    return path


# -- code in the file ----------------------------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))  # unpickling would create the marker file


def test_pickle_payloads_never_run_through_fabric_load(tmp_path, real):
    marker = tmp_path / "code_ran"
    fabric = Fabric(accelerator="cpu")
    single = tmp_path / "evil.ckpt"
    torch.save({"model": _Payload(marker), "step": 1}, single)
    directory = tmp_path / "evil_dir"
    shutil.copytree(real[0], directory)
    shutil.copy(single, directory / "shared.safetensors")
    disguised_json = tmp_path / "evil_json"
    shutil.copytree(real[0], disguised_json)
    shutil.copy(single, disguised_json / "rank_0.json")

    attempts = [
        (single, lambda: fabric.load(single, _objects(fabric))),
        (single, lambda: fabric.load(single)),
        (single, lambda: fabric.load_raw(single, _net())),
        (directory / "shared.safetensors", lambda: fabric.load(directory, _objects(fabric))),
        (disguised_json / "rank_0.json", lambda: fabric.load(disguised_json, _objects(fabric))),
    ]
    for named, attempt in attempts:
        with pytest.raises(CheckpointError) as error:
            attempt()
        assert str(named) in str(error.value)
        assert not marker.exists(), f"loading {named} ran code"
    assert "arbitrary code" in _message(lambda: fabric.load(single))


def _message(action) -> str:
    with pytest.raises(CheckpointError) as error:
        action()
    return str(error.value)


# -- damaged files, through Fabric.load -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "damage", "says"),
    [
        ("shared.safetensors", lambda b: b[: len(b) // 2], "truncated"),
        ("shared.json", lambda b: b[: len(b) // 3], "truncated"),
        ("rank_0.safetensors", lambda b: bytes(random.Random(0).randbytes(len(b))), "damaged"),
        ("meta.json", lambda b: b.replace(b'"format_version": 1', b'"format_version": 7'), "format version 7"),
    ],
)
def test_damaged_files_are_refused_naming_the_file(tmp_path, real, name, damage, says):
    path = tmp_path / "ckpt"
    shutil.copytree(real[0], path)
    (path / name).write_bytes(damage((path / name).read_bytes()))
    fabric = Fabric(accelerator="cpu")
    message = _message(lambda: fabric.load(path, _objects(fabric)))
    assert str(path / name) in message and says in message


# -- well-formed files whose contents do not fit the objects -------------------------------------------


def _mutations():
    def shape(shared, _):
        shared["model"]["0.weight"] = torch.zeros(8, 5)

    def dtype(shared, _):
        shared["model"]["2.bias"] = torch.zeros(2, dtype=torch.int64)

    def missing(shared, _):
        del shared["model"]["2.weight"]

    def unexpected(shared, _):
        shared["model"]["3.weight"] = torch.zeros(1)

    def not_a_tensor(shared, _):
        shared["model"]["0.bias"] = "import os; os.system('echo hi')"

    def not_a_state_dict(shared, _):
        shared["model"] = [1, 2, 3]

    def optimizer_groups(shared, _):
        shared["optimizer"]["param_groups"][0]["params"] = [0, 1]

    def optimizer_garbage(shared, _):
        shared["optimizer"] = {"state": 5}

    def loader_garbage(_, per_rank):
        per_rank["loader"] = {"epoch": "x"}

    return [
        (shape, ["'0.weight'", "shape [8, 5] in the file, [8, 4] in the model"]),
        (dtype, ["'2.bias'", "torch.int64 in the file, torch.float32 in the model"]),
        (missing, ["Missing key(s)", "2.weight", "strict=False"]),
        (unexpected, ["Unexpected key(s)", "3.weight", "strict=False"]),
        (not_a_tensor, ["'0.bias' is a str in the file"]),
        (not_a_state_dict, ["holds a list, not a model state dict"]),
        (optimizer_groups, ["'optimizer'", "AdamW"]),
        (optimizer_garbage, ["'optimizer'", "AdamW"]),
        (loader_garbage, ["'loader'"]),
    ]


@pytest.mark.parametrize(("mutate", "expected"), _mutations(), ids=lambda v: getattr(v, "__name__", ""))
def test_contents_that_do_not_fit_are_refused_naming_file_and_key(tmp_path, real, mutate, expected):
    shared, per_rank = copy.deepcopy(real[1]), copy.deepcopy(real[2])
    mutate(shared, per_rank)
    path = _crafted(tmp_path, shared, per_rank)
    fabric = Fabric(accelerator="cpu")
    message = _message(lambda: fabric.load(path, _objects(fabric)))
    assert str(path) in message
    for fragment in expected:
        assert fragment in message, message


def test_missing_entry_is_a_checkpoint_error_and_a_key_error(real):
    fabric = Fabric(accelerator="cpu")
    state = {**_objects(fabric), "scheduler_state": {}}
    with pytest.raises(KeyError) as error:
        fabric.load(real[0], state)
    assert isinstance(error.value, CheckpointError)
    assert str(real[0]) in str(error.value) and "scheduler_state" in str(error.value)


def test_strict_false_skips_key_mismatches_but_never_shapes(tmp_path, real):
    shared = copy.deepcopy(real[1])
    del shared["model"]["2.weight"]
    shared["model"]["extra"] = torch.ones(1)
    path = _crafted(tmp_path, shared, real[2])
    fabric = Fabric(accelerator="cpu")
    state = _objects(fabric)
    fabric.load(path, state, strict=False)
    assert torch.equal(state["model"].state_dict()["0.weight"], real[1]["model"]["0.weight"])
    shared["model"]["0.weight"] = torch.zeros(8, 5)
    path = tmp_path / "second"
    write_checkpoint(path, shared, real[2])
    with pytest.raises(CheckpointError, match="shape"):
        fabric.load(path, _objects(fabric), strict=False)


def test_a_different_float_width_is_converted_not_refused(tmp_path, real):
    shared = copy.deepcopy(real[1])
    shared["model"] = {k: v.to(torch.bfloat16) for k, v in shared["model"].items()}
    path = _crafted(tmp_path, shared, real[2])
    fabric = Fabric(accelerator="cpu")
    state = _objects(fabric)
    fabric.load(path, state)
    weight = state["model"].state_dict()["0.weight"]
    assert weight.dtype == torch.float32
    assert torch.equal(weight, shared["model"]["0.weight"].float())


# -- fuzzing Fabric.load --------------------------------------------------------------------------------

_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.builds(
        lambda shape, dtype: torch.zeros(shape, dtype=dtype),
        st.lists(st.integers(0, 3), max_size=3),
        st.sampled_from([torch.float32, torch.float16, torch.int64, torch.bool, torch.uint8]),
    ),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _containers(value, trail=()):
    """Every (container, key) location inside a nested dict/list structure."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield value, key
            yield from _containers(item, (*trail, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield value, index
            yield from _containers(item, (*trail, index))


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_real_checkpoints_load_or_raise_checkpoint_error(real, data):
    shared, per_rank = copy.deepcopy(real[1]), copy.deepcopy(real[2])
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        locations = list(_containers(shared)) + list(_containers(per_rank))
        container, key = data.draw(st.sampled_from(locations), label="where")
        action = data.draw(st.sampled_from(["replace", "delete", "add"]), label="action")
        if action == "replace":
            container[key] = data.draw(_VALUES, label="value")
        elif action == "delete" and isinstance(container, dict):
            del container[key]
        elif action == "delete":
            container.pop(key)
        elif isinstance(container, dict):
            container[data.draw(st.text(max_size=6), label="new key")] = data.draw(_VALUES, label="value")
        else:
            container.append(data.draw(_VALUES, label="value"))
    with tempfile.TemporaryDirectory() as directory:
        try:
            path = _crafted(Path(directory), shared, per_rank)
        except CheckpointError:
            return  # a mutation fabricx refuses to write (e.g. an unsupported key type) is not a test case
        fabric = Fabric(accelerator="cpu")
        try:
            fabric.load(path, _objects(fabric))
        except CheckpointError as error:
            assert str(path) in str(error), str(error)


def test_a_crafted_accumulation_window_position_raises_a_checkpoint_error_naming_the_file(real, tmp_path):
    # Found by the fuzz test above: a window position whose counter is None (or whose saving setup is unknown) was
    # refused as "saved inside a gradient-accumulation window" without naming the file.
    shared, per_rank = copy.deepcopy(real[1]), copy.deepcopy(real[2])
    positions = [c for c, _ in [*_containers(shared), *_containers(per_rank)] if isinstance(c, dict) and "counter" in c]
    assert positions, "the real checkpoint holds an accumulation window position"
    for position in positions:
        position["counter"] = None
        position.pop("world_size", None)
    path = _crafted(tmp_path, shared, per_rank)
    fabric = Fabric(accelerator="cpu")
    with pytest.raises(CheckpointError, match="gradient-accumulation window") as raised:
        fabric.load(path, _objects(fabric))
    assert str(path) in str(raised.value)


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_bytes_load_or_raise_checkpoint_error(real, data):
    names = sorted(p.name for p in real[0].iterdir())
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "ckpt"
        shutil.copytree(real[0], path)
        name = data.draw(st.sampled_from(names), label="file")
        content = bytearray((path / name).read_bytes())
        kind = data.draw(st.sampled_from(["flip", "truncate", "random", "json"]), label="damage")
        if kind == "flip":
            for _ in range(data.draw(st.integers(1, 8), label="flips")):
                at = data.draw(st.integers(0, len(content) - 1), label="at")
                content[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif kind == "truncate":
            content = content[: data.draw(st.integers(0, len(content) - 1), label="length")]
        elif kind == "random":
            content = bytearray(data.draw(st.binary(max_size=512), label="bytes"))
        elif name.endswith(".json"):
            content = bytearray(json.dumps(data.draw(_JSON, label="json")).encode())
        (path / name).write_bytes(bytes(content))
        fabric = Fabric(accelerator="cpu")
        try:
            fabric.load(path, _objects(fabric))
        except CheckpointError as error:
            assert str(path) in str(error), str(error)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["t", "v", "key", "root", "format", "version", "dtype", "shape"]), inner, max_size=4
        )
    ),
    max_leaves=10,
)
