"""Why a resume diverged, end to end: each job misses exactly one piece and must be told which."""

from __future__ import annotations

import json

import pytest

from conftest import run_chaosckpt

pytestmark = pytest.mark.e2e

LOADER = "torch.Generator at DataLoader.generator"


def trial(project, tmp_path, scenario, *job_args):
    res = run_chaosckpt(["run", "train.py", "-s", scenario, "--json", "--out", str(tmp_path / "r"), "--",
                         "--epochs", "3", *job_args], cwd=project)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, res.trial


def by_kind(t, kind):
    return [f for f in t["findings"] if f["kind"] == kind]


def test_eval_left_on_fails_a_job_that_never_calls_train(project, tmp_path):
    rc, t = trial(project, tmp_path, "eval-left-on")
    assert rc == 1 and t["outcome"] == "last-good" and t["reproduced"] is False
    (modes,) = by_kind(t, "eval-mode-in-training")
    assert "Sequential.2 (Dropout)" in modes["modules"]
    assert (modes["first_step"], modes["last_step"]) == (17, 24)
    assert by_kind(t, "rng-not-restored") == []  # dropout off changes torch's draws: not blamed on the checkpoint
    assert "trained in eval mode" in t["headline"]


def test_eval_left_on_still_names_every_stream_the_resume_left_unrestored(project, tmp_path):
    """Regression: under eval-left-on, dropout's missing draws hid an unrestored torch stream."""
    rc, t = trial(project, tmp_path, "eval-left-on", "--numpy", "--restore", "loader")
    assert rc == 1 and t["outcome"] == "last-good" and by_kind(t, "eval-mode-in-training")
    assert sorted(f["stream"] for f in by_kind(t, "rng-not-restored")) == ["numpy", "python", "torch"]


def test_eval_left_on_passes_a_job_that_calls_train(project, tmp_path):
    rc, t = trial(project, tmp_path, "eval-left-on", "--train-call")
    assert rc == 0 and t["reproduced"] is True and t["findings"] == []


def test_the_loader_generator_left_unrestored_is_named_by_where_it_is_held(project, tmp_path):
    rc, t = trial(project, tmp_path, "kill9-mid-save", "--restore", "torch,python,numpy")
    assert rc == 1
    (stream,) = by_kind(t, "rng-not-restored")
    assert stream["stream"] == LOADER and stream["aliases"] == ["torch.Generator at RandomSampler.generator"]
    assert " = " not in stream["message"] and "RandomSampler" not in stream["message"]  # one name; aliases in evidence
    (order,) = by_kind(t, "epoch-order-replayed")  # a RandomSampler has no epoch: its generator is the cause
    assert "generator" in order["message"] and "set_state()" in order["message"]
    assert "set_epoch" not in order["message"] and "epoch None" not in order["message"]
    assert "None" not in json.dumps(t["findings"]) + t["headline"]


def test_numpy_left_unrestored_and_torch_captured_before_the_evaluation_are_told_apart(project, tmp_path):
    """Regression (issue 15): the job saves torch's state, then draws from it for an evaluation before the next
    step; it restores exactly what it saved, so "save and restore it" was the wrong advice for torch."""
    rc, t = trial(project, tmp_path, "kill9-mid-save", "--numpy", "--restore", "torch,python,loader", "--bloat",
                  "--eval", "after-save")
    assert rc == 1 and t["outcome"] == "last-good"
    assert [f["stream"] for f in by_kind(t, "rng-not-restored")] == ["numpy"]
    (early,) = by_kind(t, "rng-captured-early")
    assert by_kind(t, "rng-drawn-after-restore") == []  # its loader draws from its own generator
    start = t["recovered_step"]
    assert (early["stream"], early["captured_at_step"], early["step"]) == ("torch", start, start + 1)
    assert f"restored exactly as the job captured it at the save at step {start}" in early["message"]
    assert "right before the next training step" in early["message"] and "save and restore" not in early["message"]
    (bloat,) = by_kind(t, "checkpoint-view-bloat")
    assert bloat["path"] == "head" and bloat["stored_bytes"] >= 1000 * bloat["view_bytes"]
    assert bloat["saves"] == [1, 2, 3]


def test_a_resume_that_exits_non_zero_after_its_load_leads_the_headline(project, tmp_path):
    """Regression: the headline said "diverged at step N" for a resume that crashed in a later save."""
    rc, t = trial(project, tmp_path, "kill9-mid-save", "--fail-save-after-resume")
    assert rc == 1 and t["outcome"] == "last-good" and t["recovered_step"] == 8
    (exited,) = by_kind(t, "resume-exited")
    # the interrupted save left ckpt/last.pt.tmp, so the resume's first rename works and its second fails
    assert (exited["exception"], exited["function"], exited["step"], exited["returncode"]) == (
        "FileNotFoundError", "save", 24, 1)
    assert t["headline"].startswith("FAILED kill9-mid-save: the resumed run exited with status 1 on FileNotFoundError: ")
    assert "after step 24 in save() (train.py line " in t["headline"]
    assert t["headline"].endswith("it had resumed from the last good checkpoint (step 8)")

