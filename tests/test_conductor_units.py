"""Conductor pieces on a fake or real filesystem: durable writes and the sandbox copy."""

from __future__ import annotations

import os

import pytest

from chaosckpt.conductor import atomic, sandbox


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old")
    atomic.write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["result.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "result.json"
    target.write_text("old")

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError):
        atomic.write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["result.json"]


def test_sandbox_copies_files_not_links_and_leaves_out_tool_folders(tmp_path):
    work = tmp_path / "work"
    (work / "ckpt").mkdir(parents=True)
    (work / "ckpt" / "last.pt").write_bytes(b"user data")
    (work / ".git").mkdir()
    (work / "results").mkdir()
    os.symlink("ckpt/last.pt", work / "link.pt")
    box = sandbox.create(work, tmp_path / "box", exclude=[work / "results"])
    assert sorted(os.listdir(box)) == ["ckpt", "link.pt"]
    assert os.readlink(box / "link.pt") == "ckpt/last.pt"
    assert os.stat(box / "ckpt" / "last.pt").st_ino != os.stat(work / "ckpt" / "last.pt").st_ino
    (box / "ckpt" / "last.pt").write_bytes(b"overwritten in the sandbox")
    assert (work / "ckpt" / "last.pt").read_bytes() == b"user data"


def test_links_pointing_out_of_the_workdir_are_found(fs):
    fs.create_file("/data/big.bin")
    fs.create_dir("/work/sub")
    fs.create_symlink("/work/data", "/data")
    fs.create_symlink("/work/sub/inside", "/work/sub")
    assert sandbox.links_out(__import__("pathlib").Path("/work")) == ["data"]
