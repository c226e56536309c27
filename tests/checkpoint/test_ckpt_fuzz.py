"""Fuzzing: damaged checkpoints may load or fail, but only ever with CheckpointError."""

from __future__ import annotations

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

from fabricx.checkpoint.export import load_weights, save_weights
from fabricx.checkpoint.format import read_checkpoint, write_checkpoint, write_single_file
from fabricx.utilities.exceptions import CheckpointError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("pristine")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    base = torch.arange(10.0)
    shared = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "views": [base, base[2:6], base.view(torch.int32)],
        "misc": {1: (True, None, 1.5, float("nan")), "dtype": torch.bfloat16, "size": torch.Size([3])},
        "bf16": torch.randn(4).bfloat16(),
    }
    per_rank = {"numpy": np.random.get_state(), "python": random.getstate(), "torch": torch.get_rng_state()}
    write_checkpoint(root / "ckpt", shared, per_rank)
    write_single_file(root / "single.ckpt", {"model": model.state_dict(), "step": 1})
    tied = torch.nn.Linear(4, 4, bias=False)
    save_weights(
        {"a": tied.weight, "b": tied.weight, "c": torch.ones(8)}, root / "weights", max_shard_size=64
    )
    return root


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def _only_checkpoint_errors(load, path):
    try:
        load(path)
    except CheckpointError as error:
        assert str(error)
    # Anything else propagates and fails the test.


_damage = st.one_of(
    st.tuples(st.just("random"), st.binary(max_size=600)),
    st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
    st.tuples(
        st.just("flip"), st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), min_size=1, max_size=8)
    ),
    st.tuples(st.just("insert"), st.tuples(st.floats(0.0, 1.0), st.binary(min_size=1, max_size=40))),
    st.tuples(st.just("delete"), st.none()),
)


def _apply(file: Path, damage) -> None:
    kind, arg = damage
    data = bytearray(file.read_bytes())
    if kind == "random":
        data = bytearray(arg)
    elif kind == "truncate":
        data = data[: int(len(data) * arg)]
    elif kind == "flip":
        for where, mask in arg:
            if data:
                data[min(int(len(data) * where), len(data) - 1)] ^= mask
    elif kind == "insert":
        where = int(len(data) * arg[0])
        data[where:where] = arg[1]
    else:
        file.unlink()
        return
    file.write_bytes(bytes(data))


def _copy(pristine: Path, name: str, workdir: str) -> Path:
    source, target = pristine / name, Path(workdir) / name
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy(source, target)
    return target


@FUZZ
@given(data=st.data(), damage=_damage)
def test_damaged_bytes_in_a_checkpoint_directory(pristine, data, damage):
    with tempfile.TemporaryDirectory() as workdir:
        path = _copy(pristine, "ckpt", workdir)
        file = data.draw(st.sampled_from(_files(path)))
        _apply(file, damage)
        _only_checkpoint_errors(read_checkpoint, path)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)


def _slots(node, found):
    if isinstance(node, dict):
        for key, value in node.items():
            found.append((node, key))
            _slots(value, found)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.append((node, i))
            _slots(value, found)
    return found


@FUZZ
@given(data=st.data(), value=_json_values)
def test_wrong_values_in_the_json_structure(pristine, data, value):
    with tempfile.TemporaryDirectory() as workdir:
        path = _copy(pristine, "ckpt", workdir)
        file = data.draw(st.sampled_from(sorted(path.glob("*.json"))))
        document = json.loads(file.read_text())
        slots = _slots(document, [])
        container, key = slots[data.draw(st.integers(0, len(slots) - 1))]
        container[key] = value
        file.write_text(json.dumps(document))
        _only_checkpoint_errors(read_checkpoint, path)


@settings(max_examples=20, deadline=None, database=None)
@given(damage=_damage)
def test_damaged_single_file_checkpoint(pristine, damage):
    with tempfile.TemporaryDirectory() as workdir:
        path = _copy(pristine, "single.ckpt", workdir)
        _apply(path, damage)
        _only_checkpoint_errors(read_checkpoint, path)


@settings(max_examples=20, deadline=None, database=None)
@given(data=st.data(), damage=_damage)
def test_damaged_exported_weights(pristine, data, damage):
    with tempfile.TemporaryDirectory() as workdir:
        path = _copy(pristine, "weights", workdir)
        _apply(data.draw(st.sampled_from(_files(path))), damage)
        _only_checkpoint_errors(load_weights, path)
