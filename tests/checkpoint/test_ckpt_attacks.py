"""Crafted checkpoints: loading never runs code, never reads outside the checkpoint, never allocates more
than the files hold, and every failure is a ``CheckpointError`` naming the file.

The sharded checkpoints come from ``save_sharded`` in this process (world size 1, no process group);
the payloads are hand-written pickles. Each code-running payload is first run through Python's own
``pickle.loads`` to prove it is live (it creates the marker file); then the same bytes go through
fabricx, and the marker must not appear.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricx import Fabric
from fabricx.checkpoint.consolidate import consolidate_checkpoint
from fabricx.checkpoint.safe_read import read_dcp_metadata
from fabricx.checkpoint.sharded import SHARDED_DIR, save_sharded
from fabricx.utilities.exceptions import CheckpointError

ROOT = Path(__file__).resolve().parents[2]


class _Trap:
    """Touches ``marker`` when it is created, built or called by an unpickler."""

    def __new__(cls, *args: Any) -> _Trap:
        if args:
            Path(args[0]).touch()
        return super().__new__(cls)

    def __init__(self, *args: Any) -> None:
        if args:
            Path(args[0]).touch()

    def __setstate__(self, state: Any) -> None:
        Path(state["marker"]).touch()


def _write_sharded(path: Path, tensors: dict[str, torch.Tensor] | None = None) -> Path:
    model = tensors if tensors is not None else {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(4)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "assuming the intent is to save in a single process"
        save_sharded(
            path,
            sharded={"model": model},
            kinds={"model": "model"},
            shared={"step": 3},
            per_rank={},
            rank=0,
            world_size=1,
            barrier=None,
            token=None,
        )
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_sharded(tmp_path_factory.mktemp("attacks") / "ckpt")


@pytest.fixture
def ckpt(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ckpt"
    shutil.copytree(pristine, copy)
    return copy


def _load(path: Path) -> Any:
    return Fabric(accelerator="cpu", devices=1).load(path)


# ---------------------------------------------------------------------------------------------- payloads


def _s(text: str) -> bytes:
    data = text.encode()
    assert len(data) < 256
    return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _payloads(marker: Path) -> dict[str, bytes]:
    """Pickles that run code (create ``marker``) under Python's own unpickler, one per opcode route."""
    command = f"touch {marker}"
    trap_module, trap = _Trap.__module__, "_Trap"
    return {
        "STACK_GLOBAL os.system": b"\x80\x04" + _s("os") + _s("system") + b"\x93" + _s(command) + b"\x85R.",
        # The route of the reported bypass: a dotted name inside the allowed DCP metadata module.
        "STACK_GLOBAL dotted": b"\x80\x04"
        + _s("torch.distributed.checkpoint.metadata")
        + _s("os.system")
        + b"\x93"
        + _s(command)
        + b"\x85R.",
        "GLOBAL os.system": b"\x80\x02cos\nsystem\n" + _s(command) + b"\x85R.",
        "REDUCE": b"\x80\x02c" + f"{trap_module}\n{trap}\n".encode() + _s(str(marker)) + b"\x85R.",
        "BUILD": b"\x80\x02c"
        + f"{trap_module}\n{trap}\n".encode()
        + b")\x81}"
        + _s("marker")
        + _s(str(marker))
        + b"sb.",
        "INST": b"(" + _s(command) + b"ios\nsystem\n.",
        "OBJ": b"\x80\x02(cos\nsystem\n" + _s(command) + b"o.",
        "NEWOBJ": b"\x80\x02c" + f"{trap_module}\n{trap}\n".encode() + _s(str(marker)) + b"\x85\x81.",
    }


# Opcodes refused even when they only involve allowed classes.
_ALLOWED_MODULE = "torch.distributed.checkpoint.metadata"
_OPCODE_ABUSE = {
    "INST on an allowed class": (b"(ipathlib\nPosixPath\n.", "opcode INST"),
    "OBJ on an allowed class": (b"\x80\x02(cpathlib\nPosixPath\n" + _s("x") + b"o.", "opcode OBJ"),
    "NEWOBJ of a non-dataclass": (b"\x80\x02ctorch\nSize\n)\x81.", "creates torch.Size"),
    "NEWOBJ with arguments": (
        b"\x80\x02c" + f"{_ALLOWED_MODULE}\nStorageMeta\n".encode() + _s("x") + b"\x85\x81.",
        "creates",
    ),
    "REDUCE of a non-constructor": (
        b"\x80\x02c" + f"{_ALLOWED_MODULE}\nStorageMeta\n".encode() + _s("x") + b"\x85R.",
        "calls",
    ),
    "REDUCE with bad arguments": (b"\x80\x02ctorch\nSize\n" + _s("x") + b"\x85R.", "calls"),
    "BUILD of a non-field": (
        b"\x80\x02c" + f"{_ALLOWED_MODULE}\nStorageMeta\n".encode() + b")\x81}" + _s("__class__") + b"Kxsb.",
        "sets attributes",
    ),
    "BUILD on a list": (b"\x80\x02]}b.", "fills in"),
    "NEWOBJ_EX": (b"\x80\x04ctorch\nSize\n)}\x92.", "opcode NEWOBJ_EX"),
    "EXT1": (b"\x80\x02\x82\x01.", "opcode EXT1"),
    "BINPERSID": (b"\x80\x02" + _s("x") + b"Q.", "opcode BINPERSID"),
}


@pytest.mark.parametrize("name", list(_payloads(Path("m"))))
def test_code_running_metadata_is_refused_without_running(name: str, ckpt: Path, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    payload = _payloads(marker)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pickle.loads(payload)  # the control: Python's unpickler runs it
    assert marker.exists(), "the payload is not live"
    marker.unlink()
    (ckpt / SHARDED_DIR / ".metadata").write_bytes(payload)
    with pytest.raises(CheckpointError, match="Refusing to read .*metadata.*Nothing was executed") as error:
        _load(ckpt)
    assert str(ckpt / SHARDED_DIR / ".metadata") in str(error.value)
    with pytest.raises(CheckpointError, match="Refusing to read"):
        consolidate_checkpoint(ckpt, tmp_path / "out")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", list(_OPCODE_ABUSE))
def test_object_opcodes_are_refused_on_allowed_classes_too(name: str, tmp_path: Path) -> None:
    payload, says = _OPCODE_ABUSE[name]
    file = tmp_path / ".metadata"
    file.write_bytes(payload)
    with pytest.raises(CheckpointError, match="Refusing to read") as error:
        read_dcp_metadata(tmp_path)
    assert says in str(error.value) and str(file) in str(error.value)


def test_real_metadata_reads_like_pickle(pristine: Path) -> None:
    ours = read_dcp_metadata(pristine / SHARDED_DIR)
    theirs = pickle.loads((pristine / SHARDED_DIR / ".metadata").read_bytes())
    assert ours == theirs
    loaded = _load(pristine)
    assert torch.equal(loaded["model"]["w"], torch.arange(12.0).reshape(3, 4)) and loaded["step"] == 3


# ------------------------------------------------------------------------------------- damaged structure


def _metadata(path: Path) -> Any:
    return pickle.loads((path / SHARDED_DIR / ".metadata").read_bytes())


def _rewrite(path: Path, change: Any) -> None:
    metadata = _metadata(path)
    change(metadata)
    (path / SHARDED_DIR / ".metadata").write_bytes(pickle.dumps(metadata))


def _storage(metadata: Any, fqn: str = "model.w") -> Any:
    return next(info for index, info in metadata.storage_data.items() if index.fqn == fqn)


def _claim_size(metadata: Any, shape: tuple[int, ...]) -> None:
    entry = metadata.state_dict_metadata["model.w"]
    entry.size = torch.Size(shape)
    entry.chunks[0].sizes = torch.Size(shape)


def _set_path(value: str) -> Any:
    def change(metadata: Any) -> None:
        _storage(metadata).relative_path = value

    return change


def _overlap(metadata: Any) -> None:
    first, second = (_storage(metadata, "model.w"), _storage(metadata, "model.b"))
    second.offset = first.offset


def _huge_list_index(metadata: Any) -> None:
    metadata.planner_data["model.w"] = ("model", 10**12)


def _extend_length(metadata: Any) -> None:
    _storage(metadata).length += 10**9


DAMAGE = {
    "1 GiB tensor size": (lambda m: _claim_size(m, (16384, 16384)), "claims"),
    "chunk outside the tensor": (
        lambda m: setattr(m.state_dict_metadata["model.w"].chunks[0], "offsets", torch.Size([2, 0])),
        "reaches past",
    ),
    "absolute storage path": (_set_path("/etc/passwd"), "only a plain name"),
    "storage path with ..": (_set_path("../outside.distcp"), "only a plain name"),
    "storage path into a folder": (_set_path("sub/x.distcp"), "only a plain name"),
    "missing storage file": (_set_path("nothere.distcp"), "missing"),
    "byte range past the file": (_extend_length, "has only"),
    "overlapping items": (_overlap, "overlap"),
    "list index of 10**12": (_huge_list_index, "key path"),
    "stream transforms": (lambda m: setattr(_storage(m), "transform_descriptors", ["zstd"]), "transforms"),
    "not a Metadata": (None, "not a torch.distributed.checkpoint metadata file"),
    "truncated metadata": (None, "truncated or damaged"),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_damaged_metadata_is_a_checkpoint_error_naming_the_file(name: str, ckpt: Path) -> None:
    change, says = DAMAGE[name]
    meta_file = ckpt / SHARDED_DIR / ".metadata"
    if name == "not a Metadata":
        meta_file.write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    elif name == "truncated metadata":
        meta_file.write_bytes(meta_file.read_bytes()[:200])
    else:
        _rewrite(ckpt, change)
    with pytest.raises(CheckpointError, match=says) as error:
        _load(ckpt)
    assert str(meta_file) in str(error.value) or str(ckpt / SHARDED_DIR) in str(error.value)
    assert isinstance(error.value, Exception)


def _distcp(path: Path) -> Path:
    return next((path / SHARDED_DIR).glob("*.distcp"))


def test_symlinked_storage_file_is_refused(ckpt: Path, tmp_path: Path) -> None:
    data = _distcp(ckpt)
    outside = tmp_path / "outside.distcp"
    shutil.copy(data, outside)
    data.unlink()
    data.symlink_to(outside)
    with pytest.raises(CheckpointError, match="symbolic link") as error:
        _load(ckpt)
    assert str(data) in str(error.value)


def test_truncated_distcp_is_a_checkpoint_error(ckpt: Path) -> None:
    data = _distcp(ckpt)
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="has only 100 bytes") as error:
        _load(ckpt)
    assert str(data) in str(error.value)


def test_garbled_distcp_item_is_a_checkpoint_error_not_a_base_exception(ckpt: Path) -> None:
    # The metadata is fine, the bytes are not: the failure happens inside DCP's read, which wraps it in
    # its CheckpointException (a BaseException); fabricx turns it back into a CheckpointError.
    data = _distcp(ckpt)
    data.write_bytes(b"\x00" * data.stat().st_size)
    with pytest.raises(CheckpointError) as error:
        _load(ckpt)
    assert str(data) in str(error.value)


def _expanded_item(numel: int, pad: int = 0) -> bytes:
    """A torch.save archive of one float that claims ``numel`` elements (stride 0), optionally padded
    with an extra record so that the item's byte length covers the claimed size."""
    import io
    import zipfile

    buffer = io.BytesIO()
    torch.save(torch.zeros(1).expand(numel), buffer)
    if not pad:
        return buffer.getvalue()
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            archive.writestr(info, source.read(info))
        archive.writestr(source.infolist()[0].filename.split("/")[0] + "/pad", b"\x00" * pad)
    return out.getvalue()


def _single_item_checkpoint(path: Path, item: bytes, shape: tuple[int, ...]) -> Path:
    _write_sharded(path, {"w": torch.zeros(4)})
    data = _distcp(path)
    data.write_bytes(item)

    def change(metadata: Any) -> None:
        entry = metadata.state_dict_metadata["model.w"]
        entry.size = torch.Size(shape)
        entry.chunks[0].sizes = torch.Size(shape)
        info = _storage(metadata)
        info.offset, info.length = 0, len(item)

    _rewrite(path, change)
    return path


def test_stride_zero_tensor_claiming_1_gib_is_refused(tmp_path: Path) -> None:
    path = _single_item_checkpoint(tmp_path / "bomb", _expanded_item(2**28), (2**28,))
    assert sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) < 4096
    with pytest.raises(CheckpointError, match="claims"):
        _load(path)


def test_stride_zero_tensor_within_its_bytes_is_refused(tmp_path: Path) -> None:
    path = _single_item_checkpoint(tmp_path / "expanded", _expanded_item(1000, pad=4096), (1000,))
    with pytest.raises(CheckpointError, match="expanded tensor") as error:
        _load(path)
    assert str(_distcp(path)) in str(error.value)


# ------------------------------------------------------------------------------------ paths in meta.json


def _set_directory(path: Path, value: Any) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta["extra_meta"]["fabricx_sharded"]["directory"] = value
    (path / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("value", ["../elsewhere", "/tmp", 5, None, "a/b", ".."])
def test_dcp_folder_named_in_meta_json_must_be_inside(value: Any, ckpt: Path, tmp_path: Path) -> None:
    if isinstance(value, str) and value.startswith(".."):
        shutil.copytree(ckpt / SHARDED_DIR, tmp_path / "elsewhere")
    _set_directory(ckpt, value)
    with pytest.raises(CheckpointError, match="only a plain name"):
        _load(ckpt)
    with pytest.raises(CheckpointError, match="only a plain name"):
        consolidate_checkpoint(ckpt, tmp_path / "out")


def test_symlinked_dcp_folder_is_refused(ckpt: Path, tmp_path: Path) -> None:
    shutil.move(ckpt / SHARDED_DIR, tmp_path / "elsewhere")
    (ckpt / SHARDED_DIR).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="symbolic link"):
        _load(ckpt)


def test_symlinked_shared_files_leaving_the_checkpoint_are_refused(ckpt: Path, tmp_path: Path) -> None:
    for name in ("shared.json", "shared.safetensors"):
        copy = tmp_path / f"copy-{name}"
        shutil.copytree(ckpt, copy)
        (tmp_path / name).write_bytes((copy / name).read_bytes())
        (copy / name).unlink()
        (copy / name).symlink_to(tmp_path / name)
        with pytest.raises(CheckpointError, match="symbolic link to a file outside") as error:
            _load(copy)
        assert str(copy / name) in str(error.value)
    # A link that stays inside the checkpoint is followed.
    inside = tmp_path / "inside"
    shutil.copytree(ckpt, inside)
    (inside / "shared.json").rename(inside / "real.json")
    (inside / "shared.json").symlink_to("real.json")
    assert _load(inside)["step"] == 3


# ------------------------------------------------------------------------------------------ consolidate


@pytest.mark.timeout(60)
def test_consolidate_with_a_huge_world_size_finishes(ckpt: Path, tmp_path: Path) -> None:
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["world_size"] = 10**12
    (ckpt / "meta.json").write_text(json.dumps(meta))
    (ckpt / "rank_1.json").write_bytes((ckpt / "rank_0.json").read_bytes())
    (ckpt / "rank_1.safetensors").write_bytes((ckpt / "rank_0.safetensors").read_bytes())
    out = consolidate_checkpoint(ckpt, tmp_path / "out")
    assert sorted(p.name for p in out.glob("rank_*")) == [
        "rank_0.json", "rank_0.safetensors", "rank_1.json", "rank_1.safetensors"
    ]  # fmt: skip


def test_consolidate_never_copies_through_symlinks(ckpt: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (ckpt / "rank_1.json").symlink_to(secret)
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["world_size"] = 2
    (ckpt / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="Refusing to read the per-rank file .*symbolic link") as error:
        consolidate_checkpoint(ckpt, tmp_path / "out")
    assert str(ckpt / "rank_1.json") in str(error.value)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- time and memory

_BOUNDED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tests.checkpoint.test_ckpt_attacks import _measure_loads

    print(json.dumps(_measure_loads(sys.argv[1], sys.argv[2:], reset_peak=None)))
    """
)


def _peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmHWM")


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux ``clear_refs``); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        _peak_rss()
    except OSError:
        return False
    return True


def _measure_loads(warmup: str, paths: list[str], reset_peak: bool | None) -> dict[str, dict[str, Any]]:
    """Time and memory of ``Fabric.load`` on each path: CPU seconds, peak Python allocations, peak RSS growth.

    CPU time, not wall time: the bound is on the work a crafted file causes, which a busy machine does not change."""
    import resource
    import time
    import tracemalloc

    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.load(warmup)  # a genuine checkpoint first: imports are not what is measured
    results: dict[str, dict[str, Any]] = {}
    for path in paths:
        resettable = _reset_peak_rss() if reset_peak is not False else False
        before = _peak_rss() if resettable else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        start = time.process_time()
        try:
            fabric.load(path)
            outcome = "loaded"
        except CheckpointError as error:
            outcome = "CheckpointError: " + str(error)[:160]
        except BaseException as error:
            outcome = f"{type(error).__name__}: {str(error)[:160]}"
        seconds = time.process_time() - start
        after = _peak_rss() if resettable else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        tracemalloc.start()
        try:
            fabric.load(path)
        except BaseException:
            pass
        python_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        growth = after - before
        results[path] = {"outcome": outcome, "seconds": seconds, "python_peak": python_peak, "rss_growth": growth}
    return results


def test_crafted_checkpoints_fail_fast_with_bounded_memory(tmp_path: Path, pristine: Path) -> None:
    """A 2 KiB checkpoint must not make fabric.load allocate 1 GiB: each crafted one fails in under a
    second of CPU time, with less than 100 MB of extra memory (peak RSS and Python allocations, in a fresh process)."""
    paths = [
        _single_item_checkpoint(tmp_path / "stride0", _expanded_item(2**28), (2**28,)),
        _single_item_checkpoint(tmp_path / "expanded", _expanded_item(2**20, pad=4 * 2**20), (2**20,)),
    ]
    huge = tmp_path / "huge"
    shutil.copytree(pristine, huge)
    _rewrite(huge, lambda m: _claim_size(m, (16384, 16384)))
    paths.append(huge)
    nested = tmp_path / "nested"
    shutil.copytree(pristine, nested)
    (nested / SHARDED_DIR / ".metadata").write_bytes(b"\x80\x04" + b"]" * 20_000 + b".")
    paths.append(nested)
    if _reset_peak_rss():
        results = _measure_loads(str(pristine), [str(p) for p in paths], reset_peak=True)
    else:  # no resettable peak here: measure in a fresh process, whose peak starts low
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            [sys.executable, "-c", _BOUNDED_SCRIPT, str(pristine), *map(str, paths)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(paths)
    for path, result in results.items():
        assert result["outcome"].startswith("CheckpointError"), (path, result)
        assert result["seconds"] < 1.0, (path, result)
        assert result["rss_growth"] < 100 * 2**20 and result["python_peak"] < 100 * 2**20, (path, result)


# ----------------------------------------------------------------------------------------------- fuzzing


@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzzed_metadata_and_shards_load_or_raise_checkpoint_error(pristine: Path, data: st.DataObject) -> None:
    """Random byte damage to a real .metadata or .distcp: the load succeeds or raises CheckpointError
    (never another exception, never DCP's BaseException)."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "ckpt"
        shutil.copytree(pristine, copy)
        target = data.draw(st.sampled_from([copy / SHARDED_DIR / ".metadata", _distcp(copy)]))
        raw = bytearray(target.read_bytes())
        for _ in range(data.draw(st.integers(1, 4))):
            position = data.draw(st.integers(0, len(raw) - 1))
            raw[position] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        target.write_bytes(bytes(raw))
        try:
            _load(copy)
        except CheckpointError:
            pass
