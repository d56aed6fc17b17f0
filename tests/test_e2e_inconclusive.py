"""Verdicts chaosckpt cannot establish are said so, with a reason and exit code 4, never guessed."""

from __future__ import annotations

import pytest

from conftest import processes_of, run_chaosckpt

pytestmark = pytest.mark.e2e


def inconclusive(project, tmp_path, *args):
    res = run_chaosckpt(["run", "-s", "kill9-mid-save", "--json", "--out", str(tmp_path / "r"), *args], cwd=project)
    assert res.returncode == 4, res.stdout + res.stderr
    trial = res.trial
    assert trial["status"] == "inconclusive" and trial["passed"] is False
    assert trial["headline"].startswith("INCONCLUSIVE kill9-mid-save: ")
    return trial


def test_a_job_that_saves_too_few_times_never_triggers_the_fault(project, tmp_path):
    trial = inconclusive(project, tmp_path, "train.py", "--", "--epochs", "1")
    assert trial["reason"] == "fault-not-triggered"
    assert "completed 1 checkpoint save(s)" in trial["detail"]
    assert [r["name"] for r in trial["runs"]] == ["reference"]


def test_a_failing_reference_run(project, tmp_path):
    """A job that exits non-zero before its end is a failed reference (exit 4), with no finding."""
    trial = inconclusive(project, tmp_path, "train.py", "--", "--fail")
    assert trial["reason"] == "reference-failed" and not trial["findings"]
    assert "job failed on purpose" in trial["detail"]


def test_a_run_past_its_timeout_is_killed(project, tmp_path):
    trial = inconclusive(project, tmp_path, "train.py", "--timeout", "4", "--", "--sleep", "60")
    assert trial["reason"] == "timeout"
    assert trial["runs"][0]["timed_out"] is True
    assert processes_of(tmp_path / "r") == []


def test_a_command_without_the_agent(project, tmp_path):
    trial = inconclusive(project, tmp_path, "--", "bash", "-c", "exit 0")
    assert trial["reason"] == "agent-not-loaded"


def test_a_nondeterministic_job_is_not_blamed_on_the_resume(project, tmp_path):
    trial = inconclusive(project, tmp_path, "train.py", "--", "--seed", "time")
    assert trial["reason"] == "baseline-nondeterministic"
    (finding,) = [f for f in trial["findings"] if f["kind"] == "baseline-nondeterministic"]
    assert finding["step"] == 1
