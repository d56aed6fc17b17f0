"""The Hugging Face Trainer, Accelerate and DCP end to end, each on its real default defect and one robust setup.

What the resumes really do was established by hand: the Trainer's resume_from_checkpoint=True takes the
highest-numbered checkpoint-N/ and crashes on the one a kill left without trainer_state.json while
checkpoint-4 is complete; Accelerate with total_limit deletes the old folder before writing the new one,
and load_state() takes the newest folder. A checkpoint is the whole folder: save=2 is checkpoint-8 /
checkpoint_1, not the Trainer's second torch.save call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import project_with, run_chaosckpt

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torch.distributed.fsdp")
pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "jobs"


def trial(tmp_path, job, *args):
    tmp_path.mkdir()
    project = project_with(tmp_path, JOBS / job)
    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--json", "--out", str(tmp_path / "r"), "--", *args],
                        cwd=project)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, res.trial


def kinds(t):
    return [f["kind"] for f in t["findings"]]


def test_hf_trainer_resume_from_checkpoint_true_takes_the_incomplete_folder(tmp_path):
    rc, t = trial(tmp_path / "default", "hf_trainer_job.py")
    assert rc == 1 and t["outcome"] == "crashed" and t["last_good_step"] == 4
    assert t["fault"]["save"] == 2 and t["fault"]["step"] == 8 and "checkpoint-8/" in t["fault"]["path"]
    assert "resume-chose-incomplete" in kinds(t)
    assert "no-step-in-checkpoint" not in kinds(t) and "rng-states-missing" not in kinds(t)
    rc, t = trial(tmp_path / "robust", "hf_trainer_job.py", "--resume-complete")
    assert rc == 0, t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 4 and t["reproduced"] is True
    assert kinds(t) == []


def test_accelerate_total_limit_deletes_the_last_complete_checkpoint_first(tmp_path):
    rc, t = trial(tmp_path / "default", "accelerate_job.py")
    assert rc == 1 and t["last_good_step"] == 4  # the job deleted it before the next was complete: still the last good
    (rotated,) = [f for f in t["findings"] if f["kind"] == "rotation-before-complete"]
    assert rotated["deleted_step"] == 4
    # the file the kill caught Accelerate writing sent no end event: the fault event names it, so it is counted
    struck = t["fault"]["path"]
    assert t["fault"]["files"][struck] is not None
    state = t["fault"]["file_states"][struck]
    assert state["bytes"] < state["full_bytes"] and state["loads"] is False
    assert [f["path"] for f in t["findings"] if f["kind"] == "torn-checkpoint"] == [struck]
    rc, t = trial(tmp_path / "robust", "accelerate_job.py", "--total-limit", "2", "--resume-complete")
    assert rc == 0, t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 4 and t["reproduced"] is True
    assert "rotation-before-complete" not in kinds(t)


def test_dcp_on_two_ranks_resume_takes_a_folder_without_metadata(tmp_path):
    """kill9 fires inside dcp.save; the resume through get_state_dict (its lr-0 step is no training step) is
    judged from the DTensor shards' digests; the crash is the rank's own error, not torchrun's banner."""
    def dcp_trial(folder, *args):
        folder.mkdir()
        project = project_with(folder, JOBS / "dcp_job.py")
        res = run_chaosckpt(["run", "train.py", "--nproc", "2", "-s", "kill9-mid-save", "--json",
                             "--out", str(folder / "r"), "--", *args], cwd=project)
        assert res.returncode in (0, 1), res.stdout + res.stderr
        return res.returncode, res.trial

    rc, t = dcp_trial(tmp_path / "default")
    assert rc == 1 and t["outcome"] == "crashed" and t["last_good_step"] == 4
    assert t["fault"]["save"] == 2 and t["fault"]["bytes"] > 0
    assert "CheckpointException" in t["error"] and "=====" not in t["error"]
    assert "resume-chose-dcp-without-metadata" in kinds(t) and "torn-checkpoint" not in kinds(t)
    rc, t = dcp_trial(tmp_path / "robust", "--resume-complete")
    assert rc == 0, t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 4 and t["reproduced"] is True
