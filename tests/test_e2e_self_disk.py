"""chaosckpt's own disk full (issue 16 item 2): the results on a small tmpfs give INCONCLUSIVE, exit 4, naming the
disk and the bytes, never PASSED or FAILED. Mounting needs root; without it the tests are skipped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, processes_of, run_chaosckpt

pytestmark = pytest.mark.e2e


@pytest.fixture
def small_disk(tmp_path):
    """Mount a tmpfs of the requested size under ``tmp_path``; unmounted afterwards."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk-{size}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "train_job.py", root / "train.py")
    return root


@pytest.mark.parametrize("size, says", [
    ("1m", "the reference run could not write"),
    ("10m", "needed; the faulted and resume runs would not fit"),
])
def test_a_full_results_disk_is_inconclusive_and_named(tmp_path, small_disk, size, says):
    disk = small_disk(size)
    job = project(tmp_path)

    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--out", str(disk), "--", "--epochs", "2",
                         "--bloat"], cwd=job)

    assert res.returncode == 4, res.stdout + res.stderr
    assert res.stdout.startswith("INCONCLUSIVE kill9-mid-save: chaosckpt's own disk is full: the disk holding")
    assert f"(mounted at {disk})" in res.stdout and "bytes free" in res.stdout and says in res.stdout
    assert "PASSED" not in res.stdout and "FAILED" not in res.stdout
    assert processes_of(disk) == []
