"""Weight export: size parsing, sharding, tied weights, loading back."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open

from fabricx.checkpoint.export import load_weights, load_weights_into, parse_size, save_weights
from fabricx.utilities.exceptions import CheckpointError


class TiedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)  # 512 bytes
        self.hidden = torch.nn.Linear(8, 8)  # 256 + 32 bytes
        self.norm = torch.nn.LayerNorm(8)  # 32 + 32 bytes
        self.head = torch.nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.hidden.register_buffer("steps", torch.tensor(5))


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (123, 123),
        ("5GB", 5 * 10**9),
        ("5GiB", 5 * 2**30),
        ("200MB", 200 * 10**6),
        ("1.5 KiB", 1536),
        ("7", 7),
    ],
)
def test_parse_size(given, expected):
    assert parse_size(given) == expected


@pytest.mark.parametrize("given", ["5 parsecs", "GB", "", "-1GB", 0, True, 1.5])
def test_parse_size_refuses_with_a_hint(given):
    with pytest.raises(ValueError, match="size"):
        parse_size(given)


def test_sharded_export_with_tied_weights(tmp_path):
    torch.manual_seed(0)
    model = TiedModel()
    save_weights(model, tmp_path / "out", max_shard_size=300)

    files = sorted(os.listdir(tmp_path / "out"))
    assert files == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    state = model.state_dict()
    assert set(index["weight_map"]) == set(state)  # every name, the alias included
    assert index["metadata"]["aliases"] == {"head.weight": "embed.weight"}
    assert index["weight_map"]["head.weight"] == index["weight_map"]["embed.weight"]
    unique_bytes = sum(t.numel() * t.element_size() for k, t in state.items() if k != "head.weight")
    assert index["metadata"]["total_size"] == unique_bytes
    for name in files[:3]:
        with safe_open(str(tmp_path / "out" / name), "pt") as handle:
            keys = list(handle.keys())
            # Within the limit, unless it is one tensor larger than the limit on its own (the embedding).
            assert sum(handle.get_tensor(k).nbytes for k in keys) <= 300 or keys == ["embed.weight"]
            assert "head.weight" not in keys  # stored once

    loaded = load_weights(tmp_path / "out")
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert torch.equal(loaded[name], tensor), name
    assert loaded["head.weight"] is loaded["embed.weight"]

    fresh = TiedModel()
    result = load_weights_into(fresh, tmp_path / "out")
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(fresh.head.weight, model.embed.weight) and fresh.head.weight is fresh.embed.weight


def test_tensor_larger_than_the_limit_gets_its_own_shard(tmp_path):
    state = {"small_a": torch.ones(10), "big": torch.ones(1000), "small_b": torch.ones(10)}
    save_weights(state, tmp_path, max_shard_size="100B")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 3
    assert index["weight_map"]["big"] not in (index["weight_map"]["small_a"], index["weight_map"]["small_b"])


def test_single_file_export_records_aliases_and_keeps_other_files(tmp_path):
    model = TiedModel()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"stale shard from an earlier export")
    save_weights(model, tmp_path, filename_prefix="model")
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as handle:
        assert json.loads(handle.metadata()["fabricx_aliases"]) == {"head.weight": "embed.weight"}
        assert "head.weight" not in list(handle.keys())
    loaded = load_weights(tmp_path / "model.safetensors")
    assert loaded["head.weight"] is loaded["embed.weight"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded[name], tensor)


def test_load_weights_into_reports_mismatches(tmp_path):
    save_weights({"weight": torch.ones(2, 2), "extra": torch.ones(1)}, tmp_path)
    layer = torch.nn.Linear(2, 2)
    result = load_weights_into(layer, tmp_path, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    assert torch.equal(layer.weight, torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="bias"):
        load_weights_into(layer, tmp_path, strict=True)


def test_views_of_one_buffer_are_stored_as_copies(tmp_path):
    base = torch.arange(8.0)
    save_weights({"first": base[:4], "second": base[4:], "all": base}, tmp_path)
    loaded = load_weights(tmp_path)
    assert torch.equal(loaded["first"], base[:4]) and torch.equal(loaded["second"], base[4:])


def test_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"'opt'.*not a plain torch\.Tensor"):
        save_weights({"opt": 3}, tmp_path / "a")
    with pytest.raises(CheckpointError, match="No exported weights"):
        load_weights(tmp_path)
    save_weights({"w": torch.ones(3), "v": torch.ones(3)}, tmp_path / "b", max_shard_size=4)
    index_file = tmp_path / "b" / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    index["weight_map"]["w"] = "../../etc/passwd"
    index_file.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="plain file name"):
        load_weights(tmp_path / "b")
    index_file.write_text("{trunc")
    with pytest.raises(CheckpointError, match=r"index\.json"):
        load_weights(tmp_path / "b")
