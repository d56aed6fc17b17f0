"""The preemption scenario on tests/jobs/preempt_job.py (its truth by hand: preempt_job.truth.md): a SIGTERM in save
2, a grace period, the SIGKILL; an emergency save that lands passes, one torn over the last checkpoint fails, one
beside it that never lands passes with its finding; a job that exits 0 without saving, one with no handler, a shell
launcher that keeps the signal from the trainer and torchrun, which passes it on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import judged, project_with, run_chaosckpt

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).parent / "jobs"
JOB = JOBS / "preempt_job.py"


def kinds(trial):
    return {f["kind"]: f for f in trial["findings"]}


def test_an_atomic_emergency_save_passes_and_one_written_in_place_and_cut_by_the_sigkill_fails(tmp_path):
    for name in ("long", "atomic", "inplace"):
        (tmp_path / name).mkdir()
    rc, t = judged(tmp_path / "long", JOB, "-s", "preemption", "-p", "grace=30", "--", "--handler", "atomic")
    assert rc == 0 and (t["outcome"], t["recovered_step"], t["last_good_step"]) == ("last-good", 17, 17)
    record = t["fault"]["preemption"]
    assert (record["signal"], record["step"], record["ended_in_grace"]) == ("SIGTERM", 16, True)
    assert record["handling"] == {"rank 0": "handled"} and record["sent_to"] == ["rank 0"]
    assert [(s["step"], s["finished"]) for s in record["saves_after"]] == [(17, True)]
    assert not kinds(t)

    # a 2 s emergency save against a grace of 0.5 s: room to begin it on a loaded machine, none to finish it
    rc, t = judged(tmp_path / "atomic", JOB, "-s", "preemption", "-p", "grace=0.5", "--", "--handler", "atomic",
                   "--slow", "2")
    assert rc == 0 and (t["outcome"], t["recovered_step"]) == ("last-good", 16)
    cut = kinds(t)["emergency-save-too-long"]
    assert (cut["step"], cut["grace_s"], cut["severity"]) == (17, 0.5, "warning")
    assert t["fault"]["preemption"]["ended_in_grace"] is False

    rc, t = judged(tmp_path / "inplace", JOB, "-s", "preemption", "-p", "grace=0.5", "--", "--handler", "inplace",
                   "--slow", "2")
    assert rc == 1 and t["outcome"] == "crashed" and t["error_path"] == "ckpt/last.pt"
    torn = kinds(t)["emergency-save-torn"]
    assert (torn["path"], torn["overwritten_step"], torn["step"]) == ("ckpt/last.pt", 16, 17)
    assert t["headline"].startswith("FAILED preemption: the job began its emergency save of step 17")


def test_a_job_that_exits_0_without_saving_fails_and_one_without_a_handler_passes_with_its_lost_steps(tmp_path):
    (tmp_path / "exit").mkdir()
    (tmp_path / "none").mkdir()
    rc, t = judged(tmp_path / "exit", JOB, "-s", "preemption", "--", "--handler", "exit")
    assert rc == 1 and (t["outcome"], t["recovered_step"]) == ("last-good", 8)
    success = kinds(t)["exit-0-after-preemption"]
    assert (success["step"], success["last_saved_step"], success["severity"]) == (16, 8, "error")
    assert "status 0" in t["headline"] and "None" not in t["headline"]

    rc, t = judged(tmp_path / "none", JOB, "-s", "preemption", "--", "--handler", "none")
    assert rc == 0 and (t["outcome"], t["recovered_step"]) == ("last-good", 8)
    assert t["fault"]["preemption"]["handling"] == {"rank 0": "default"}
    unsaved = kinds(t)["no-emergency-save"]
    assert (unsaved["steps_lost"], unsaved["severity"]) == (8, "warning")
    assert "no handler" in unsaved["message"]


def test_a_shell_launcher_keeps_the_signal_from_the_trainer(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    shutil.copy(JOB, project / "preempt_job.py")
    shutil.copy(JOBS / "preempt_launcher.sh", project / "train.sh")
    res = run_chaosckpt(["run", "train.sh", "-s", "preemption", "-p", "target=launcher", "-p", "grace=5", "--json",
                         "--out", str(tmp_path / "r")], cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    t = res.trial
    missed = kinds(t)["signal-missed-ranks"]
    assert missed["ranks"] == [0] and "launcher only" in missed["message"]
    assert "never reached its trainer" in kinds(t)["no-emergency-save"]["message"]
    record = t["fault"]["preemption"]
    assert record["target"] == "launcher" and record["sent_to"] == ["launcher"]
    assert record["handling"] == {"launcher": "default", "rank 0": "handled"}  # sh dies of it; the trainer never gets it


def test_torchrun_passes_the_launcher_s_signal_to_both_ranks_which_save_their_shards(tmp_path):
    project = project_with(tmp_path, JOB)
    res = run_chaosckpt(["run", "train.py", "--nproc", "2", "-s", "preemption", "-p", "target=launcher", "-p",
                         "grace=20", "--json", "--out", str(tmp_path / "r"), "--", "--ddp"], cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    t = res.trial
    assert (t["outcome"], t["recovered_step"]) == ("last-good", 17)
    record = t["fault"]["preemption"]
    assert record["sent_to"] == ["launcher"] and record["handling"] == {
        "launcher": "handled", "rank 0": "handled", "rank 1": "handled"}  # torchrun's own handler, then the ranks'
    assert sorted(s["rank"] for s in record["saves_after"] if s["finished"]) == [0, 1]
    assert not {"signal-missed-ranks", "no-emergency-save"} & set(kinds(t))


def test_a_signal_no_job_can_handle_or_an_unknown_target_is_a_one_line_usage_error(tmp_path):
    project = project_with(tmp_path, JOB)
    for param, word in (("signal=SIGKILL", "kill9-mid-save"), ("target=ranks", "all, launcher"),
                        ("grace=soon", "seconds")):
        res = run_chaosckpt(["run", "train.py", "-s", "preemption", "-p", param], cwd=project)
        assert res.returncode == 2 and word in res.stderr and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
