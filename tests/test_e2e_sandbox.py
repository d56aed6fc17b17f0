"""Jobs that reach outside their working directory, and working directories holding odd files: every scenario
leaves every byte outside the results folder as it was, and says what the README promises."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterator

import pytest
from conftest import project_with, run_chaosckpt

from chaosckpt.conductor.runs import confinement, sandbox

JOB = Path(__file__).resolve().parent / "jobs" / "place_job.py"
pytestmark = pytest.mark.e2e
needs_namespace = pytest.mark.skipif(not confinement.available(), reason="no mount namespace on this machine")


def digest(*roots: Path) -> Dict[str, str]:
    """Every name, type, mode and content under ``roots`` (files hashed in chunks: inputs may be large), but
    chaosckpt's own ``.chaosckpt/`` folder in a project, where each finished run joins the history."""
    out = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not (d == ".chaosckpt" and Path(dirpath) == Path(root)))
            for name in sorted(dirs + files):
                path = Path(dirpath, name)
                st = os.lstat(path)
                key = str(path)
                if path.is_symlink():
                    out[key] = "link:" + os.readlink(path)
                elif path.is_file():
                    with open(path, "rb") as f:
                        out[key] = f"{st.st_mode:o}:" + hashlib.file_digest(f, "sha256").hexdigest()
                else:
                    out[key] = f"{st.st_mode:o}:{st.st_mtime_ns}"
    return out


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside the project and outside /tmp (which every run gets a private overlay of)."""
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
    folder = Path(tempfile.mkdtemp(prefix="chaosckpt-outside-", dir=base))
    (folder / "keep.txt").write_text("the user's own file\n")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return project_with(tmp_path, JOB)


def chaos(project: Path, *args: str):
    return run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--out", str(project.parent / "results"), *args],
                         cwd=project)


def passed(res) -> None:
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("PASSED kill9-mid-save: resumed from the last good checkpoint"), res.stdout


def refused(res, path: Path, folder: Path) -> None:
    assert res.returncode == 2, res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"chaosckpt: error: the job writes outside its working directory ({path})"), last
    assert f"--map {folder}" in last and "Traceback" not in res.stderr


@needs_namespace
def test_symlinked_checkpoint_folder_is_overlaid(project, outside):
    (project / "ckpt").symlink_to(outside, target_is_directory=True)
    before = digest(project, outside)
    res = chaos(project)
    passed(res)
    assert f"writes to {outside}" in res.stderr and "go to overlays in the sandbox" in res.stderr
    assert digest(project, outside) == before


@needs_namespace
def test_absolute_output_path_is_refused_in_one_line(project, outside):
    before = digest(project, outside)
    res = chaos(project, "--", "--ckpt", str(outside / "run7"))
    refused(res, outside / "run7", outside)
    assert digest(project, outside) == before


@needs_namespace
def test_chdir_then_save_is_refused_then_mapped(project, outside):
    before = digest(project, outside)
    refused(chaos(project, "--", "--chdir", str(outside)), outside / "ckpt", outside)
    passed(chaos(project, "--map", str(outside), "--", "--chdir", str(outside)))
    assert digest(project, outside) == before


@needs_namespace
def test_fifo_socket_and_a_large_input_are_not_copied(project):
    """One trial for the three odd files, to keep the suite short: a FIFO and a socket are skipped with a note
    (a FIFO used to hang chaosckpt, a socket to crash it), a sparse 1 GB input is bound read-only, not copied."""
    os.mkfifo(project / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(project / "sock"))
    with open(project / "data.bin", "wb") as f:
        f.truncate(1 << 30)
    try:
        before = digest(project)
        res = chaos(project, "--keep-sandbox", "--", "--input", "data.bin")
        passed(res)
        assert "skipped pipe (FIFO), sock (socket): FIFOs, sockets, devices and the results of chaosckpt runs in " \
               "progress are never copied" in res.stderr
        assert digest(project) == before
    finally:
        server.close()
    if sandbox.reflinks(project, project.parent):
        assert "sandbox of 2 files, 1.0 GB: cloned copy-on-write (reflinks)" in res.stderr
        return
    assert "sandbox of 2 files, 1.0 GB: copied (1.5 kB written per sandbox); 1 large input (1.0 GB: data.bin) bound " \
        "read-only, not copied, since this file system has no reflinks" in res.stderr
    boxes = list((project.parent / "results").glob("*/sandboxes/faulted"))
    assert boxes and (boxes[0] / "data.bin").stat().st_size == 0


def test_a_stale_checkpoint_is_named_with_the_fix(project):
    subprocess.run([sys.executable, "train.py"], cwd=project, check=True, capture_output=True)
    before = digest(project)
    res = chaos(project)
    assert res.returncode == 4, res.stdout + res.stderr
    assert ("INCONCLUSIVE kill9-mid-save: the uninterrupted run resumed from a checkpoint already in the working "
            "directory: the uninterrupted run began by loading ckpt/last.pt") in res.stdout
    assert "--exclude ckpt (config key exclude = [\"ckpt\"])" in res.stdout
    passed(chaos(project, "--exclude", "ckpt"))
    assert digest(project) == before
