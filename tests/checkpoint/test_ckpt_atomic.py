"""Atomic directory and file writing."""

from __future__ import annotations

import os

import pytest

from fabricx.checkpoint import atomic
from fabricx.checkpoint.atomic import (
    atomic_directory,
    atomic_write_file,
    commit_directory,
    prepare_directory,
    resolve_directory,
)


def test_new_directory_appears_only_when_complete(tmp_path):
    target = tmp_path / "sub" / "ckpt"
    with atomic_directory(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith("ckpt.tmp-")
        (tmp / "a.txt").write_text("new")
        assert not target.exists()
    assert (target / "a.txt").read_text() == "new"
    assert os.listdir(target.parent) == ["ckpt"]


def test_existing_directory_is_swapped_and_old_copy_removed(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
        (tmp / "only_old.txt").write_text("x")
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("new")
    assert (target / "a.txt").read_text() == "new"
    assert not (target / "only_old.txt").exists()
    assert os.listdir(tmp_path) == ["ckpt"]


def test_failure_inside_leaves_old_intact_and_no_temp(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("half")
        raise RuntimeError("boom")
    assert (target / "a.txt").read_text() == "old"
    assert os.listdir(tmp_path) == ["ckpt"]


def test_crash_between_the_two_renames_is_recovered_by_readers(tmp_path, monkeypatch):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    real_rename = os.rename
    calls = []

    def rename_then_die(src, dst):
        calls.append((src, dst))
        if len(calls) >= 2:  # the old copy was moved away; the process "dies" before anything else
            raise KeyboardInterrupt("simulated crash")
        real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("new")
    monkeypatch.setattr(atomic.os, "rename", real_rename)

    assert not target.exists()
    found = resolve_directory(target)
    assert found is not None and found.name.startswith("ckpt.old-")
    assert (found / "a.txt").read_text() == "old"
    assert resolve_directory(tmp_path / "never_written") is None


def test_prepare_and_commit_with_a_shared_token(tmp_path):
    target = tmp_path / "ckpt"
    (tmp_path / "ckpt.tmp-step7").mkdir()  # left over by a crashed attempt with the same token
    (tmp_path / "ckpt.tmp-step7" / "stale.txt").write_text("stale")
    tmp = prepare_directory(target, token="step7")
    assert tmp == tmp_path / "ckpt.tmp-step7" and list(tmp.iterdir()) == []
    (tmp / "rank_0.txt").write_text("0")
    (tmp / "rank_1.txt").write_text("1")
    commit_directory(tmp, target)
    assert sorted(os.listdir(target)) == ["rank_0.txt", "rank_1.txt"]
    with pytest.raises(ValueError, match="token"):
        prepare_directory(target, token="../escape")


def test_atomic_write_file_replaces_or_keeps(tmp_path):
    target = tmp_path / "f.bin"
    atomic_write_file(target, lambda f: f.write(b"one"))
    atomic_write_file(target, lambda f: f.write(b"two"))
    assert target.read_bytes() == b"two"

    def fail(handle):
        handle.write(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write_file(target, fail)
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_failed_second_rename_puts_the_old_version_back(tmp_path, monkeypatch):
    target = tmp_path / "ckpt"
    with atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("old")
    real_rename = os.rename

    def fail_on_new(src, dst):
        if ".tmp-" in os.fspath(src):
            raise OSError("rename failed")
        real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", fail_on_new)
    with pytest.raises(OSError, match="rename failed"), atomic_directory(target) as tmp:
        (tmp / "a.txt").write_text("new")
    assert (target / "a.txt").read_text() == "old"
    assert os.listdir(tmp_path) == ["ckpt"]
