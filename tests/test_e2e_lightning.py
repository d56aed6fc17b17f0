"""A Lightning job end to end: ModelCheckpoint(save_last=True) resumed with fit(ckpt_path="last").

What the resume really does was established by hand (Lightning's own log lines, checked here too):
killed in the first epoch's last.ckpt save (the second file of checkpoint 1), it finds no last.ckpt and
starts from scratch although epoch=0-step=4.ckpt is complete; killed in a later epoch's checkpoint, it
restores last.ckpt.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import project_with, run_chaosckpt

from chaosckpt.conductor.runs import confinement

pytest.importorskip("lightning")
pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "lightning_job.py"


def trial(tmp_path, *args, scenario="kill9-mid-save"):
    project = project_with(tmp_path, JOB)
    res = run_chaosckpt(["run", "train.py", "-s", scenario, "--json", "--out", str(tmp_path / "r"), *args],
                        cwd=project)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, res.trial


def resume_log(t):
    (resume,) = [r for r in t["runs"] if r["name"] == "resume"]
    return Path(resume["stderr"]).read_text()


def test_a_kill_in_the_first_last_ckpt_save_restarts_lightning_from_scratch(tmp_path):
    rc, t = trial(tmp_path, "-p", "save=1", "-p", "fraction=0.75", "--", "--epochs", "2")
    assert rc == 1 and t["outcome"] == "scratch" and t["last_good_step"] == 4
    assert "there is no last checkpoint available" in resume_log(t)  # Lightning says so itself
    assert t["headline"].startswith("FAILED kill9-mid-save: the resumed job restarted from scratch")


def test_a_kill_in_a_later_save_resumes_lightning_from_last_ckpt_and_reproduces_it(tmp_path):
    rc, t = trial(tmp_path, "-p", "save=2", "-p", "fraction=0.25", "--", "--epochs", "2", "--no-shuffle")
    assert "Restored all states from the checkpoint" in resume_log(t)
    assert rc == 0, t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 4 and t["reproduced"] is True
    assert t["compared_steps"] == 4


@pytest.mark.skipif(not confinement.available(), reason="/dev/shm is another file system only in the sandbox's namespace")
def test_a_power_loss_takes_lightning_s_unsynced_checkpoint_and_names_the_move_that_became_a_copy(tmp_path):
    """Regression (issue 15): Lightning saves into memory and moves fsspec's temporary file onto last.ckpt, never
    fsynced; with $TMPDIR on another file system the move is a copy over the live last.ckpt."""
    rc, t = trial(tmp_path, "--", "--epochs", "2", "--tmpdir", "/dev/shm", scenario="power-loss")
    assert rc == 1 and t["outcome"] == "crashed", t["headline"]
    assert t["fault"]["files"] == {"ckpt/epoch=1-step=8.ckpt": 0, "ckpt/last.ckpt": 0}
    (lost,) = [f for f in t["findings"] if f["kind"] == "acknowledged-checkpoint-lost"]
    assert lost["path"] == "ckpt/epoch=1-step=8.ckpt, ckpt/last.ckpt" and lost["step"] == 8
    assert lost["missing"].startswith("ckpt/last.ckpt: its data was not fsynced (0 of ")  # the file the resume read first
    (copy,) = [f for f in t["findings"] if f["kind"] == "move-became-copy"]
    assert copy["path"] == "ckpt/last.ckpt" and copy["predicted"] is False
    assert copy["message"].startswith("ckpt/last.ckpt is replaced by a move from /dev/shm/, another file system")
