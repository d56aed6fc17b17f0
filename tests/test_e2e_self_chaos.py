"""chaosckpt under the faults it injects: its own signals and death (issue 16 item 1, issue 9 item 5)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import pytest

from conftest import REPO, processes_of, run_chaosckpt

pytestmark = pytest.mark.e2e


def start(args: List[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chaosckpt", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def sandboxes(results: Path) -> List[Path]:
    return [p for p in results.rglob("*") if p.is_dir() and (p.name == "sandboxes" or p.name.startswith(".sandbox-"))]


def robust(tmp_path: Path, config: str = "") -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "train_job.py", project / "train.py")
    if config:
        (project / "chaosckpt.toml").write_text(config)
    return project


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_of_run_kill_the_job_remove_the_sandboxes_and_exit_as_shells_expect(tmp_path, signum, status):
    project = robust(tmp_path)
    results = project / "chaosckpt-results"
    proc = start(["run", "train.py", "-s", "kill9-mid-save", "--", "--epochs", "2", "--sleep", "60"], project)
    wait_for(lambda: processes_of(results))

    os.kill(proc.pid, signum)  # the conductor alone, as a scheduler's cancel sends it
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == status, err
    assert f"Terminated by {signal.Signals(signum).name}" in err and "Traceback" not in err
    assert processes_of(results) == []
    assert sandboxes(results) == []
    [stored] = results.glob("*/result.json")  # what ran is kept: inconclusive, interrupted
    [trial] = json.loads(stored.read_text())["trials"]
    assert (trial["status"], trial["reason"]) == ("inconclusive", "interrupted")
    assert trial["headline"] == ("INCONCLUSIVE kill9-mid-save: chaosckpt was stopped before the trial ended: "
                                 f"terminated by {signal.Signals(signum).name} during the uninterrupted run; run the "
                                 "trial again")
    assert json.loads(run_chaosckpt(["history", "--json"], cwd=project).stdout)["scenarios"] == []  # not recorded


def test_sigkill_of_run_leaves_no_job_alive_even_behind_a_shell_and_the_next_run_cleans_its_sandbox(tmp_path):
    project = robust(tmp_path)
    results = project / "chaosckpt-results"
    job = f"{shlex.quote(sys.executable)} train.py --epochs 2 --sleep 60; true"  # bash forks python, then waits
    proc = start(["run", "-s", "kill9-mid-save", "--", "bash", "-c", job], project)
    wait_for(lambda: len(processes_of(results)) >= 2)

    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)

    # bash by its parent-death signal, python by its agent's watchdog, which checks once a second but waits for
    # the GIL: on a loaded machine a job caught importing torch's libraries takes seconds more
    wait_for(lambda: processes_of(results) == [], timeout=30)
    assert len(sandboxes(results)) == 1
    cleaned = run_chaosckpt(["clean"], cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert "was left by a chaosckpt that was killed: removed 1 sandbox(es)" in cleaned.stderr
    assert sandboxes(results) == []
    again = run_chaosckpt(["clean"], cwd=project)
    assert "nothing to clean" in again.stderr






def test_a_suite_killed_during_its_reference_leaves_no_job_and_resumes(tmp_path):
    project = robust(tmp_path, 'command = "train.py --epochs 2"\nscenarios = ["kill9-mid-save"]\n')
    results = project / "chaosckpt-results"
    proc = start(["suite"], project)
    wait_for(lambda: processes_of(results))

    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    wait_for(lambda: processes_of(results) == [], timeout=30)  # as in the test above: a loaded machine takes longer
    (project / ".chaosckpt" / "history.sqlite").write_bytes(b"garbage " * 512)

    resumed = run_chaosckpt(["suite", "--resume"], cwd=project)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "PASSED" in resumed.stdout and "history.sqlite was damaged" in resumed.stderr
    assert "was left by a chaosckpt that was killed" in resumed.stderr
    assert "0 of 1 trials already done" in resumed.stderr
    folders = sorted(results.glob("*-suite*"))
    assert len(folders) == 1
    assert json.loads((folders[0] / "suite.json").read_text())["state"] == "finished"
    assert sandboxes(results) == []


def test_sighup_of_a_suite_stops_its_workers_and_prints_the_resume_line(tmp_path):
    project = robust(tmp_path, 'command = "train.py --epochs 2 --sleep 60"\nscenarios = ["kill9-mid-save"]\n')
    results = project / "chaosckpt-results"
    proc = start(["suite"], project)
    wait_for(lambda: processes_of(results))

    os.kill(proc.pid, signal.SIGHUP)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 129, err
    assert "continue it with: chaosckpt suite --resume" in err and "Terminated by SIGHUP" in err
    assert processes_of(results) == []
    assert sandboxes(results) == []


def test_a_second_resume_of_a_suite_being_resumed_is_refused_in_one_line(tmp_path):
    project = robust(tmp_path, 'command = "train.py --epochs 2 --sleep 60"\nscenarios = ["kill9-mid-save"]\n')
    results = project / "chaosckpt-results"
    first = start(["suite"], project)
    wait_for(lambda: processes_of(results))
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    killed = set(processes_of(results))  # the first suite's job, going with it (bubblewrap's --die-with-parent)
    resuming = start(["suite", "--resume"], project)
    wait_for(lambda: set(processes_of(results)) - killed)

    second = run_chaosckpt(["suite", "--resume"], cwd=project)

    assert second.returncode == 2, second.stderr
    assert second.stderr.count("\n") == 1 and "is being run by another chaosckpt (pid" in second.stderr
    assert processes_of(results)  # the first resume's job was left alone
    os.kill(resuming.pid, signal.SIGTERM)
    _, err = resuming.communicate(timeout=60)
    assert resuming.returncode == 143, err
    assert processes_of(results) == []


def test_a_job_whose_loss_is_nan_from_the_start_is_judged_from_its_own_step_events(tmp_path):
    project = robust(tmp_path)
    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "-p", "save=3", "--json", "--", "--epochs", "4",
                         "--nan"], cwd=project)

    trial = res.doc["trials"][0]
    assert res.returncode == 0, res.stderr
    assert (trial["outcome"], trial["recovered_step"], trial["last_good_step"]) == ("last-good", 16, 16)
    assert [f["kind"] for f in trial["findings"]] == ["non-finite-loss"]
    assert "loss was nan from step 1" in trial["findings"][0]["message"]


def test_a_cached_reference_is_reused_while_its_inputs_hold_and_run_again_when_damaged(tmp_path):
    project = robust(tmp_path, 'command = "train.py --epochs 2"\nscenarios = ["kill9-mid-save"]\n')
    (project / "notes.txt").write_text("read by nobody\n")
    first = run_chaosckpt(["suite"], cwd=project)
    assert first.returncode == 0 and "reference run done" in first.stderr, first.stderr
    (project / "suite.log").write_text("what the user's shell redirected\n")
    (project / "notes.txt").write_text("still read by nobody\n")

    second = run_chaosckpt(["suite"], cwd=project)

    assert second.returncode == 0 and "reference run reused from the cache" in second.stderr, second.stderr
    events = sorted((project / ".chaosckpt" / "references").glob("*/events/*.jsonl"), key=lambda p: -p.stat().st_size)
    events[0].write_bytes(events[0].read_bytes()[: events[0].stat().st_size // 2])
    third = run_chaosckpt(["suite"], cwd=project)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "is damaged (events/" in third.stderr and "running the reference again" in third.stderr
    assert "reference run done" in third.stderr  # a changed source does the same: see test_self_state
