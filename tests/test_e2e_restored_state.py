"""The restored-state diff end to end (tests/jobs/state_job.py, state_job.truth.md): each part of the training
state a checkpoint leaves out is named, two at once are both named, and the control that restores everything
passes with nothing to say."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).parent / "jobs" / "state_job.py"


def test_a_resume_that_restores_neither_optimizer_nor_scheduler_is_told_both(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--unsaved", "optimizer", "--unsaved", "scheduler")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 8
    kinds = [f["kind"] for f in t["findings"]]
    assert kinds[:2] == ["optimizer-not-restored", "scheduler-not-restored"], kinds
    optimizer, scheduler = t["findings"][:2]
    assert optimizer["part"] == "opt (Adam)" and (optimizer["with_state"], optimizer["reference_with_state"]) == (0, 6)
    assert ["last_epoch", 0, 8] in scheduler["changed"] and scheduler["part"] == "sched (CosineAnnealingLR)"
    assert "the optimizer opt (Adam) was not restored" in t["headline"]


def test_buffers_left_out_fail_the_trial_though_every_loss_matches(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--unsaved", "buffers")
    assert rc == 1 and t["reproduced"] is False and t["max_loss_diff"] == 0
    (found,) = [f for f in t["findings"] if f["kind"] == "buffers-not-restored"]
    assert found["buffers"] == ["1.num_batches_tracked", "1.running_mean", "1.running_var"]
    assert "with every loss the same" in t["headline"] and "largest loss difference" not in t["headline"]


def test_the_control_that_restores_everything_passes_with_nothing_to_say(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save")
    assert rc == 0 and t["status"] == "passed" and t["reproduced"] is True
    assert [f for f in t["findings"] if f["severity"] in ("error", "warning")] == []
