"""A copy of the checkpoint torn by the fault, which the resume never reads, is named end to end:
tests/jobs/bestcopy_job.py saves last.pt atomically, then shutil.copyfile()s it over best.pt every epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parent / "jobs"
# A default kill on a job that keeps no copy (the bundled robust example) names no torn copy and leaves last.pt
# loading: test_e2e_kill9's test_robust_example_passes_and_leaves_the_user_directory_alone asserts it on its trial.


def test_a_kill_inside_the_copy_passes_with_the_torn_copy_named(tmp_path):
    """The kill lands halfway through best.pt's copy: the resume reads last.pt and passes; best.pt is torn, and
    the resumed run's next save copies it whole again."""
    rc, t = judged(tmp_path, JOBS / "bestcopy_job.py", "-s", "kill9-mid-save", "-p", 'file="best.pt"')
    assert rc == 0 and t["status"] == "passed" and t["outcome"] == "last-good", t["headline"]
    assert t["fault"]["path"] == "ckpt/best.pt"
    assert {"ckpt/last.pt", "ckpt/best.pt"} <= set(t["fault"]["files"])  # the renamed checkpoint and the struck copy
    best = t["fault"]["file_states"]["ckpt/best.pt"]
    assert 0 < best["bytes"] < best["full_bytes"] and best["loads"] is False
    assert t["fault"]["file_states"]["ckpt/last.pt"]["loads"] is True
    (torn,) = [f for f in t["findings"] if f["kind"] == "torn-copy"]
    assert torn["severity"] == "warning" and torn["path"] == "ckpt/best.pt" and torn["copy_of"] == "ckpt/last.pt"
    assert "the resume loaded ckpt/last.pt, not it, so the resume was unaffected" in torn["message"].lower()
    assert torn["repaired_step"] is not None and f"step {torn['repaired_step']} wrote it whole again" in torn["message"]


def test_a_kill_inside_the_first_copy_is_named_from_the_fault_event(tmp_path):
    """Save 1's copy struck: no save-move of a copy was ever sent (the process died inside it); the fault event
    says which copy it was inside."""
    rc, t = judged(tmp_path, JOBS / "bestcopy_job.py", "-s", "kill9-mid-save", "-p", "save=1", "-p", 'file="best.pt"')
    assert rc == 0 and t["status"] == "passed" and t["recovered_step"] == 8, t["headline"]
    (torn,) = [f for f in t["findings"] if f["kind"] == "torn-copy"]
    assert torn["path"] == "ckpt/best.pt" and torn["copy_of"] == "ckpt/last.pt" and torn["save"] == 1
    assert torn["repaired_step"] == 16  # the resumed run's first save copies it whole again
