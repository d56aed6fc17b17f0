"""Asynchronous checkpoints end to end on tests/jobs/async_thread_job.py: the main thread serializes its state
every 6 steps and a saver thread writes, fsyncs and renames it while the training goes on. By default the job
waits for each save before the next and at its end, and re-raises a save's error; ``--daemon`` never waits and
never looks (async_thread_job.truth.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaosckpt.conductor.reports import html
from chaosckpt.conductor.results import stored
from conftest import judged

pytestmark = pytest.mark.e2e

JOB = Path(__file__).resolve().parent / "jobs" / "async_thread_job.py"


def test_a_kill_in_flight_strikes_the_background_write_while_training_steps_and_the_robust_saver_passes(tmp_path):
    """steps_in_flight=2: the kill lands in save 2's write on the saver thread, the training held two steps after
    the save of step 12 began; last.pt (step 6) is whole, and the timeline says where the fault struck."""
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "-p", "steps_in_flight=2")
    fault = t["fault"]
    assert (fault["save"], fault["step"], fault["thread"], fault["path"]) == (2, 12, "saver", "ckpt/last.pt.tmp")
    assert fault["steps_in_flight"] == 2 and fault["held"]
    assert rc == 0 and t["outcome"] == "last-good" and t["recovered_step"] == 6 and t["reproduced"], t["headline"]
    (trial,) = stored.load(Path(t["results_dir"])).trials
    struck = [f for f in html.timeline(trial) if f.startswith("the fault hit save 2")]
    assert struck and "in its background thread saver, 2 training steps after the save began, the training held " \
                      "there" in struck[0]


def test_a_job_that_exits_with_its_last_save_in_flight_and_never_sees_a_full_disk_fails_on_both(tmp_path):
    """--daemon under enospc: the reference run itself exited while the step-24 save was being written; the
    faulted run's saver died on the ENOSPC, and the job trained on to its end without noticing."""
    rc, t = judged(tmp_path, JOB, "-s", "enospc", "--", "--daemon")
    kinds = {f["kind"]: f for f in t["findings"]}
    assert rc == 1 and t["status"] == "failed"
    assert kinds["exit-with-save-in-flight"]["step"] == 24 and kinds["exit-with-save-in-flight"]["save"] == 4
    unobserved = kinds["background-error-unobserved"]
    assert unobserved["save"] == 2 and unobserved["thread"] == "saver" and unobserved["steps_after"] >= 6
    assert t["fault"]["noticed"] is False
    assert t["headline"].startswith("FAILED enospc: the job never noticed the error that failed its background save")


def test_a_saver_that_finishes_before_the_next_step_ends_its_checkpoint_there_and_a_power_loss_strikes_in_time(
        tmp_path):
    """--pause-after-handoff: each checkpoint, serialized on the training thread, is written, renamed and fsynced by
    the saver before the next step. It ends at that step, not at the exit, so the power loss after save 2 comes
    there and the resume has steps to take (it was INCONCLUSIVE whenever a loaded machine made this order)."""
    rc, t = judged(tmp_path, JOB, "-s", "power-loss", "--", "--pause-after-handoff")
    assert rc == 0 and t["status"] == "passed", t["headline"]
    assert t["outcome"] == "last-good" and t["recovered_step"] == 12 and t["compared_steps"] == 12
