"""Checkpoints as step-named files in one shared folder (tests/jobs/step_files_job.py, step_files_job.truth.md):
a rotation that deletes the newest complete file before the next is written loses it to a kill, and a resume that
takes the torn newest file by name is told it chose an incomplete checkpoint, as with per-checkpoint folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).parent / "jobs" / "step_files_job.py"


def test_deleting_the_newest_file_before_the_next_save_fails_and_a_torn_newest_file_taken_by_name_is_named(tmp_path):
    (tmp_path / "before").mkdir()
    (tmp_path / "bytes").mkdir()
    rc, t = judged(tmp_path / "before", JOB, "-s", "kill9-mid-save", "--", "--rotate", "before")
    assert rc == 1 and (t["outcome"], t["last_good_step"], t["lost_steps"]) == ("scratch", 8, 16)
    assert [f["kind"] for f in t["findings"]] == ["rotation-before-complete"]  # not "the job may not be resuming"
    assert t["findings"][0]["path"] == "ckpt/step_000008.pt"

    rc, t = judged(tmp_path / "bytes", JOB, "-s", "enospc", "--", "--writer", "bytes")
    assert rc == 1 and t["outcome"] == "crashed" and t["error_path"] == "ckpt/step_000016.pt"
    kinds = {f["kind"]: f for f in t["findings"]}
    assert kinds["resume-chose-incomplete"]["path"] == "ckpt/step_000016.pt"
    assert kinds["resume-chose-incomplete"]["complete_step"] == 8 and "torn-checkpoint" in kinds
