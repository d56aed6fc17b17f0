"""Why a resume diverged, end to end: each part of the training state a checkpoint leaves out is named
(tests/jobs/state_job.py, state_job.truth.md), two at once are both named, the control that restores everything
passes with nothing to say, and steps replayed without a DataLoader are named from what the model consumed
(counter_job.py); a resume with two defects no batch lines up for is told both (epoch_skip_job.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import judged, project_with, run_chaosckpt

pytestmark = pytest.mark.e2e

JOB = Path(__file__).parent / "jobs" / "state_job.py"


def test_a_resume_that_restores_neither_optimizer_nor_scheduler_is_told_both(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--unsaved", "optimizer", "--unsaved", "scheduler")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 8
    named = [f for f in t["findings"] if f["kind"].endswith("-not-restored")]
    assert [f["kind"] for f in named] == ["optimizer-not-restored", "scheduler-not-restored"]
    optimizer, scheduler = named
    (lacks,) = [f for f in t["findings"] if f["kind"] == "checkpoint-lacks-state"]
    assert lacks["parts"] == ["opt (Adam)", "sched (CosineAnnealingLR)"] and lacks["severity"] == "error"
    assert optimizer["part"] == "opt (Adam)" and (optimizer["with_state"], optimizer["reference_with_state"]) == (0, 6)
    assert ["last_epoch", 0, 8] in scheduler["changed"] and scheduler["part"] == "sched (CosineAnnealingLR)"
    assert "the optimizer opt (Adam) was not restored" in t["headline"]


def test_buffers_left_out_fail_the_trial_though_every_loss_matches(tmp_path):
    rc, t = judged(tmp_path, JOB, "-s", "kill9-mid-save", "--", "--unsaved", "buffers")
    assert rc == 1 and t["reproduced"] is False and t["max_loss_diff"] == 0
    (found,) = [f for f in t["findings"] if f["kind"] == "buffers-not-restored"]
    assert found["buffers"] == ["1.num_batches_tracked", "1.running_mean", "1.running_var"]
    assert "with every loss the same" in t["headline"] and "largest loss difference" not in t["headline"]


def test_the_control_that_restores_everything_passes_every_one_machine_scenario_with_nothing_to_say(tmp_path):
    project = project_with(tmp_path, JOB)
    scenarios = ("kill9-mid-save", "enospc", "power-loss", "eval-left-on")
    res = run_chaosckpt(["suite", "train.py", "-j", "2", *(a for s in scenarios for a in ("-s", s))], cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    (folder,) = (project / "chaosckpt-results").glob("*-suite*")
    trials = json.loads((folder / "result.json").read_text())["trials"]
    assert sorted(t["scenario"] for t in trials) == sorted(scenarios)
    for t in trials:
        assert t["status"] == "passed" and t["reproduced"] is True, t["headline"]
        assert [f for f in t["findings"] if f["severity"] in ("error", "warning")] == [], t["scenario"]
        assert not any(f["kind"] == "checkpoint-lacks-state" for f in t["findings"])


def test_batches_a_counter_slices_from_a_tensor_are_lined_up_by_what_the_model_consumed(tmp_path):
    rc, t = judged(tmp_path, Path(__file__).parent / "jobs" / "counter_job.py", "-s", "kill9-mid-save")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 8
    (replayed,) = [f for f in t["findings"] if f["kind"] == "steps-replayed"]
    assert (replayed["first_step"], replayed["last_step"], replayed["batch_of_step"]) == (1, 8, 1)
    assert "trained again on the batches of steps 1-8" in t["headline"]


def test_a_resume_that_skips_the_epoch_s_rest_and_reseeds_is_told_both_even_in_eval_mode(tmp_path):
    """epoch_skip_job.py --reseed (epoch_skip_job.truth.md): the rest of the saved epoch skipped and torch's stream
    seeded anew, two defects no batch lines up for. Resumed in eval mode with no DataLoader, the stream is compared
    as the step's first forward began, before dropout (off in eval mode) would have drawn."""
    job = Path(__file__).parent / "jobs" / "epoch_skip_job.py"
    rc, t = judged(tmp_path, job, "-s", "eval-left-on", "--", "--reseed")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 12
    kinds = [f["kind"] for f in t["findings"] if f["severity"] in ("error", "warning")]
    assert {"eval-mode-in-training", "rng-not-restored", "step-count-differs"} <= set(kinds)
    (counted,) = [f for f in t["findings"] if f["kind"] == "step-count-differs"]
    assert (counted["resumed_steps"], counted["reference_steps"]) == (16, 20)
