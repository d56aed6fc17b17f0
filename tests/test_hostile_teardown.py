"""A teardown interrupter: sandbox removal killed outright half way, then ``clean`` (and the next run) finish it,
lock or no lock, because a sandbox is renamed to ``.removing-<name>`` in one step before it is removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import run_chaosckpt

from chaosckpt.conductor.runs import leftovers, sandbox


def fill(box, files: int) -> None:
    for i in range(files // 100):
        folder = box / f"d{i}"
        folder.mkdir(parents=True)
        for j in range(100):
            (folder / f"f{j}").write_bytes(b"x" * 64)
    locked = box.parent / f"{box.name}.layers" / "0" / "work" / "work"
    locked.mkdir(parents=True)
    (locked / "inner").write_text("x")
    locked.chmod(0)  # as overlayfs leaves its work folders


def test_a_removal_killed_half_way_leaves_only_trash_that_clean_removes(tmp_path):
    run = tmp_path / "out" / "20260101-000000-kill9-mid-save"
    box = run / ".sandbox-faulted"
    fill(box, 20_000)
    remover = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                                "from chaosckpt.conductor.runs import sandbox; sandbox.remove(Path(sys.argv[1]))",
                                str(box)])
    while not (run / f"{leftovers.TRASH}.sandbox-faulted").exists() and remover.poll() is None:
        time.sleep(0.01)
    os.kill(remover.pid, signal.SIGKILL)
    remover.wait()
    assert not box.exists(), "the sandbox is renamed before anything in it is removed"
    assert not (run / leftovers.LOCK).exists()
    result = run_chaosckpt(["clean", "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in run.iterdir()) == [], result.stderr
    again = run_chaosckpt(["clean", "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert "nothing to clean" in again.stderr


def test_remove_takes_a_sandbox_and_its_locked_layers(tmp_path):
    box = tmp_path / ".sandbox-x"
    fill(box, 100)
    sandbox.remove(box)
    assert list(tmp_path.iterdir()) == []


def test_kept_sandboxes_of_a_finished_run_are_not_trash(tmp_path):
    run = tmp_path / "out" / "20260101-000000-kill9-mid-save"
    (run / "sandboxes" / "faulted").mkdir(parents=True)
    assert leftovers.sweep(tmp_path / "out") == []
    assert (run / "sandboxes" / "faulted").is_dir()
