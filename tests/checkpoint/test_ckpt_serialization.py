"""Round trips and refusals of the code-free state serializer."""

from __future__ import annotations

import json
import math
import random
from collections import OrderedDict

import numpy as np
import pytest
import torch

from fabricx.checkpoint.serialization import dump, load
from fabricx.utilities.exceptions import CheckpointError


def _roundtrip(state, tmp_path):
    dump(state, tmp_path, "s")
    return load(tmp_path, "s")


def _trained_model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    for _ in range(2):
        model(torch.randn(6, 3)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_optimizer_and_module_state_round_trip_into_fresh_objects(tmp_path):
    model, optimizer = _trained_model_and_optimizer()
    loaded = _roundtrip({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp_path)

    opt_state = loaded["optimizer"]
    assert list(opt_state["state"]) == [0, 1, 2, 3, 4, 5]  # int keys stay ints
    assert opt_state["param_groups"][0]["betas"] == (0.8, 0.95)
    assert isinstance(opt_state["param_groups"][0]["betas"], tuple)
    assert isinstance(loaded["model"], OrderedDict)
    assert loaded["model"]._metadata == model.state_dict()._metadata

    fresh_model, fresh_optimizer = _trained_model_and_optimizer()
    with torch.no_grad():
        for p in fresh_model.parameters():
            p.zero_()
    fresh_model.load_state_dict(loaded["model"])
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    for a, b in zip(fresh_model.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for key, value in optimizer.state_dict()["state"].items():
        for name, tensor in value.items():
            assert torch.equal(fresh_optimizer.state_dict()["state"][key][name], tensor)


def test_rng_states_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "numpy_generator": rng.bit_generator.state,
        "python": random.getstate(),
    }
    loaded = _roundtrip(state, tmp_path)

    assert torch.equal(loaded["torch"], state["torch"])
    assert loaded["python"] == state["python"]
    assert loaded["numpy_generator"] == state["numpy_generator"]
    name, keys, pos, has_gauss, cached = loaded["numpy"]
    assert name == "MT19937" and keys.dtype == np.uint32 and np.array_equal(keys, state["numpy"][1])
    assert (pos, has_gauss, cached) == state["numpy"][2:]
    # Restoring the states reproduces the same random streams.
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    expected = (np.random.rand(3), random.random())
    np.random.set_state(loaded["numpy"])
    random.setstate(loaded["python"])
    assert np.array_equal(np.random.rand(3), expected[0]) and random.random() == expected[1]


def test_scalar_types_and_special_floats(tmp_path):
    state = {
        "floats": [math.inf, -math.inf, math.nan, -0.0, 1e-310, 0.1],
        "ints": [0, -1, 2**63, -(2**70), 10**400],
        "misc": (None, True, False, "ünïcode", b"\x00\xff"),
        "keys": {1: "int", 2.5: "float", None: "none", False: "bool", "s": "str"},
        "dtype": torch.bfloat16,
        "size": torch.Size([2, 3]),
        "np": [np.float32(1.5), np.int64(-7), np.bool_(True), np.arange(6, dtype=np.float16).reshape(2, 3)],
    }
    loaded = _roundtrip(state, tmp_path)

    floats = loaded["floats"]
    assert floats[:2] == [math.inf, -math.inf] and math.isnan(floats[2])
    assert math.copysign(1.0, floats[3]) == -1.0 and floats[4:] == [1e-310, 0.1]
    assert loaded["ints"] == state["ints"]
    assert loaded["misc"] == state["misc"]
    assert loaded["keys"] == state["keys"]
    assert [type(k) for k in loaded["keys"]] == [int, float, type(None), bool, str]
    assert loaded["dtype"] is torch.bfloat16 and loaded["size"] == torch.Size([2, 3])
    assert isinstance(loaded["size"], torch.Size)
    assert [type(v) for v in loaded["np"]] == [np.float32, np.int64, np.bool_, np.ndarray]
    assert np.array_equal(loaded["np"][3], state["np"][3]) and loaded["np"][3].dtype == np.float16


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.bool, torch.complex128],
)
def test_tensors_of_any_dtype_and_layout(tmp_path, dtype):
    base = (torch.randn(4, 6) * 10).to(dtype)
    state = {"plain": base, "transposed": base.t(), "scalar": base[1, 2].clone(), "empty": base[:0]}
    loaded = _roundtrip(state, tmp_path)
    for key, value in state.items():
        assert loaded[key].dtype == dtype and loaded[key].device.type == "cpu"
        assert torch.equal(loaded[key], value), key


def test_shared_memory_is_stored_once_and_shared_again(tmp_path):
    base = torch.arange(20.0)
    tied = torch.nn.Linear(4, 4).weight.detach()
    state = {
        "base": base,
        "slice": base[5:9],
        "grid": base.view(4, 5).t(),
        "bits": base.view(torch.int32),
        "tied_a": tied,
        "tied_b": tied,
        "requires_grad": torch.nn.Parameter(torch.ones(2)),
    }
    dump(state, tmp_path, "s")
    from safetensors.torch import load_file

    stored = load_file(tmp_path / "s.safetensors")
    assert sum(t.numel() * t.element_size() for t in stored.values()) == 20 * 4 + 16 * 4 + 2 * 4

    loaded = load(tmp_path, "s")
    for key in ("base", "slice", "grid", "bits", "tied_a"):
        assert torch.equal(loaded[key], state[key]), key
    assert loaded["tied_a"] is loaded["tied_b"]
    loaded["base"][6] = -1.0  # views share memory again, as they did when saved
    assert loaded["slice"][1] == -1.0 and loaded["grid"][1, 1] == -1.0


def test_unsupported_values_name_the_key_path_and_the_fix(tmp_path):
    class Custom:
        pass

    with pytest.raises(CheckpointError, match=r"\['optimizer'\]\['hook'\].*Custom.*state_dict"):
        dump({"optimizer": {"hook": Custom()}}, tmp_path, "s")
    with pytest.raises(CheckpointError, match=r"\['a'\]\[1\].*set"):
        dump({"a": [1, {2}]}, tmp_path, "s")
    with pytest.raises(CheckpointError, match=r"key \(1, 2\).*tuple"):
        dump({(1, 2): 3}, tmp_path, "s")
    with pytest.raises(CheckpointError, match=r"object.*pickling"):
        dump({"a": np.array([object()])}, tmp_path, "s")
    with pytest.raises(CheckpointError, match="to_dense"):
        dump({"a": torch.eye(2).to_sparse()}, tmp_path, "s")
    with pytest.raises(CheckpointError, match="meta device"):
        dump({"a": torch.empty(2, device="meta")}, tmp_path, "s")
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(CheckpointError, match="contains itself"):
        dump({"a": cycle}, tmp_path, "s")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_loading_rejects_a_node_of_the_wrong_type(tmp_path):
    dump({"a": torch.ones(2), "b": [1]}, tmp_path, "s")
    document = json.loads((tmp_path / "s.json").read_text())
    document["root"]["v"][1][1] = {"t": "list", "v": {"not": "a list"}}
    (tmp_path / "s.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match=r"s\.json.*list node"):
        load(tmp_path, "s")

    document["root"]["v"][1][1] = {"t": "pickle", "v": "cos\nsystem"}
    (tmp_path / "s.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="unknown node type 'pickle'"):
        load(tmp_path, "s")

    document["root"]["v"][1][1] = {"t": "tensor", "key": "nope", "dtype": "float32", "shape": [2]}
    (tmp_path / "s.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="'nope' is missing"):
        load(tmp_path, "s")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_stored_from_cpu(tmp_path):
    base = torch.arange(12.0, device="cuda")
    state = {"base": base, "slice": base[3:7], "bf16": torch.randn(3, 3, device="cuda").bfloat16().t()}
    loaded = _roundtrip(state, tmp_path)
    for key, value in state.items():
        assert loaded[key].device.type == "cpu" and torch.equal(loaded[key], value.cpu()), key
    assert loaded["slice"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
