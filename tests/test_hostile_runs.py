"""Hostile setups for ``run``: the whole file system as the working directory, and a results folder on a full disk."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import run_chaosckpt

from chaosckpt.conductor.runs.runlog import Save


@pytest.mark.parametrize("workdir", ["/", "/proc/self", "/sys/fs"])
def test_a_workdir_holding_the_kernels_file_systems_is_a_usage_error(tmp_path, workdir):
    result = run_chaosckpt(["run", "-s", "kill9-mid-save", "--workdir", workdir, "--out", str(tmp_path / "out"),
                            "--", "python3", "-c", "pass"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "file system of the kernel's state" in line and "--workdir" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs filled to the last byte; skipped where mounting is not permitted (not root, no namespace)."""
    disk = tmp_path / "full"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (disk / "out").mkdir()
        with open(disk / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=True)


def test_out_on_a_full_disk_is_inconclusive_and_leaves_no_lock(tmp_path, full_disk):
    (tmp_path / "train.py").write_text("print('step')\n")
    result = run_chaosckpt(["run", "-s", "kill9-mid-save", "--out", str(full_disk / "out"), "train.py"],
                           cwd=tmp_path, timeout=300)
    assert result.returncode == 4, result.stderr
    assert "is full" in result.stderr and str(full_disk) in result.stderr
    assert list((full_disk / "out").iterdir()) == []


def test_a_temporary_file_renamed_into_place_held_no_checkpoint_to_overwrite():
    """A save through ``ckpt.pt.tmp`` renamed over ``ckpt.pt`` leaves nothing at the temporary name: a later save
    interrupted while writing that name overwrote no checkpoint (no in-place-save finding about it)."""
    save = Save(index=1, step=4, path="/w/ckpt.pt.tmp", digest="d", ts=1.0,
                moves=[{"src": "/w/ckpt.pt.tmp", "dst": "/w/ckpt.pt", "ok": True, "copied": False}])
    assert save.moved_away("/w/ckpt.pt.tmp") and not save.moved_away("/w/ckpt.pt")
    copied = Save(index=2, step=8, path="/w/a.pt", digest="d", ts=2.0,
                  moves=[{"src": "/w/a.pt", "dst": "/w/b.pt", "ok": True, "copied": True}])
    assert not copied.moved_away("/w/a.pt")


def test_output_to_a_full_disk_names_that_disk_and_is_no_verdict(tmp_path, full_disk):
    """Standard output on a full disk: the error names the output file's disk, not the current folder's, and a
    command without verdicts (audit) exits 2, not 4."""
    torch.save({"w": torch.zeros(2)}, tmp_path / "w.pt")
    for args in (["audit", "w.pt"], ["audit", "--json", "w.pt"]):
        with open(full_disk / "out.txt", "wb") as out:
            proc = subprocess.run([sys.executable, "-m", "chaosckpt", *args], cwd=tmp_path, stdout=out,
                                  stderr=subprocess.PIPE, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        [line] = proc.stderr.splitlines()
        assert f"cannot write the output to {full_disk / 'out.txt'}" in line and f"mounted at {full_disk}" in line
