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

pytest.importorskip("lightning")
pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "lightning_job.py"


def trial(tmp_path, *args):
    project = project_with(tmp_path, JOB)
    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--json", "--out", str(tmp_path / "r"), *args],
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
