"""Conductor pieces on a fake or real filesystem: durable writes and the sandbox copy."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.runs import leftovers, preflight, sandbox


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


def test_the_results_of_another_chaosckpt_run_in_progress_are_neither_copied_nor_counted(tmp_path):
    """A second chaosckpt beside this one, its results folder inside the project: its sandboxes come and go."""
    work = tmp_path / "work"
    other = work / "results" / "20261202-054342-kill9-mid-save"
    (other / "sandboxes" / "reference").mkdir(parents=True)
    (other / "sandboxes" / "reference" / "train.py").write_text("print()")
    (other / leftovers.LOCK).touch()
    (work / "train.py").write_text("print()")
    survey = preflight.survey(work, [], tmp_path / "boxes")
    assert survey.files == 1 and survey.skipped == ["results/20261202-054342-kill9-mid-save (a chaosckpt run in progress)"]
    box = sandbox.create(work, tmp_path / "box")
    assert sorted(p.name for p in box.rglob("*")) == ["results", "train.py"]


def test_files_and_folders_that_vanish_while_the_sandbox_is_copied_are_left_out(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "x").write_text("x")
    for name in ("a", "b", "c"):
        (work / name).write_text(name)
    copy2 = sandbox.shutil.copy2
    copied = []

    def copy_while_another_process_deletes(src, dst):
        if not copied:
            for path in (work / "a", work / "b", work / "c"):
                if str(path) != src:
                    path.unlink()
            sandbox.shutil.rmtree(work / "sub", ignore_errors=True)
        copied.append(src)
        return copy2(src, dst)

    monkeypatch.setattr(sandbox.shutil, "copy2", copy_while_another_process_deletes)
    box = sandbox.create(work, tmp_path / "box")
    assert [p.name for p in box.iterdir() if p.is_file()] == [os.path.basename(copied[0])]


def test_a_copy_error_of_a_file_still_there_is_raised(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").write_text("x")

    def unreadable(src, dst):
        raise PermissionError(13, "Permission denied", src)

    monkeypatch.setattr(sandbox.shutil, "copy2", unreadable)
    with pytest.raises(sandbox.shutil.Error):
        sandbox.create(work, tmp_path / "box")


def test_links_pointing_out_of_the_workdir_are_found(fs):
    fs.create_file("/data/big.bin")
    fs.create_dir("/work/sub")
    fs.create_symlink("/work/data", "/data")
    fs.create_symlink("/work/sub/inside", "/work/sub")
    assert sandbox.links_out(__import__("pathlib").Path("/work")) == ["data"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed here")
def test_the_preflight_says_what_is_left_out_and_names_many_files_git_ignores_without_leaving_them_out(tmp_path):
    """Issue 33, item 7: run from a repository's root, a sandbox copies what git ignores too (a data set, an
    environment); the preflight names it and the --exclude that leaves it out, and copies it all the same (a job
    may read its gitignored data)."""
    work = tmp_path / "repo"
    (work / "shards").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / ".gitignore").write_text("shards/\nnotes.txt\n")
    (work / "train.py").write_text("print()")
    (work / "notes.txt").write_text("a few bytes git ignores")
    for i in range(100):
        (work / "shards" / f"{i}.bin").write_bytes(b"rows")
    (work / "ckpt").mkdir()
    said = preflight.lines(work, [work / "ckpt"], tmp_path / "boxes", [])
    assert "left out: .git, ckpt;" in said[0] and said[0].startswith("sandbox of 103 files")
    assert said[1] == ("every sandbox copies 101 files (423 B) that git ignores (shards: 100 files, 400 B; notes.txt: 1 "
                       "file, 23 B); if the job never reads them, leave them out: --exclude shards --exclude notes.txt "
                       '(config key exclude = ["shards", "notes.txt"])')
    for extra in range(1, 100):
        (work / "shards" / f"{extra}.bin").unlink()
    assert len(preflight.lines(work, [], tmp_path / "boxes", [])) == 1, "a few ignored files: nothing to say"
