"""Where a suite's workers run (``suite.executors``): Slurm's options and states as chaosckpt reads them, the
verdict of a trial whose Slurm job ended without one, and the suite's refusals before anything runs. The
cluster itself is tests/test_slurm.py's."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_chaosckpt

from chaosckpt.conductor.runs import slurm
from chaosckpt.conductor.suite import executors


def test_the_slurm_table_and_slurm_args_become_sbatch_options_in_order():
    table = {"partition": "gpu", "gpus": 2, "time": "01:00:00", "cpus": 8, "args": "--qos=low --exclusive"}
    assert executors.sbatch_args(table, ["-A", "ml"]) == [
        "--partition=gpu", "--gpus=2", "--time=01:00:00", "--cpus-per-task=8", "--qos=low", "--exclusive", "-A", "ml"]
    assert executors.sbatch_args({"args": ["--mem", "16G"]}) == ["--mem", "16G"]


def test_a_slurm_exit_code_is_the_worker_s_status_and_a_signal_is_128_plus_its_number():
    assert slurm.exit_status("1:0") == 1
    assert slurm.exit_status("0:9") == 137
    assert slurm.exit_status("0:0") == 0
    assert slurm.exit_status("") is None


def _trial_folder(tmp_path: Path, prefix: bool = False) -> Path:
    folder = tmp_path / "trials" / "enospc"
    folder.mkdir(parents=True)
    options = {"prefix": str(folder) if prefix else None}
    (folder / "spec.json").write_text(json.dumps({"scenario": "enospc", "params": {"save": 2}, "options": options}))
    return folder


def test_a_trial_whose_slurm_job_timed_out_is_inconclusive_naming_the_job_and_its_state(tmp_path):
    folder = _trial_folder(tmp_path)
    executors.ended_without_verdict(folder, "4242", "TIMEOUT", 0)
    trial = json.loads((folder / "result.json").read_text())["trials"][0]
    assert (trial["status"], trial["reason"], trial["params"]) == ("inconclusive", "slurm-job-ended", {"save": 2})
    assert trial["headline"] == (
        "INCONCLUSIVE enospc: the trial's Slurm job ended without a verdict: Slurm job 4242 reached its time limit "
        f"before the trial had a verdict (see {folder / 'worker.log'})")
    failed = _trial_folder(tmp_path / "b")
    executors.ended_without_verdict(failed, "7", "FAILED", 3)
    assert "Slurm job 7 ended FAILED with exit status 3 before" in (failed / "result.json").read_text()


def test_a_shared_faulted_run_whose_job_ended_gets_no_verdict_its_trials_run_their_own(tmp_path):
    folder = _trial_folder(tmp_path, prefix=True)
    executors.ended_without_verdict(folder, "5", "PREEMPTED", None)
    assert not (folder / "result.json").exists()


def test_a_reference_run_s_job_gets_no_trial_verdict_and_one_that_ended_without_a_reference_stops_the_suite(tmp_path):
    from chaosckpt.conductor.errors import UsageError
    from chaosckpt.conductor.suite import plan_run

    folder = tmp_path / "suite"
    executors.ended_without_verdict(tmp_path, "6", "CANCELLED", None)  # no spec at all: nothing to say
    spec = {"dest": str(folder / "reference"), "key": "k", "parts": {}, "command": [sys.executable, "-c", "pass"],
            "workdir": str(tmp_path / "no-such-folder"), "timeout": 60.0, "exclude": [], "fresh": True, "stop": None,
            "maps": []}
    folder.mkdir()
    with pytest.raises(UsageError) as refused:  # a real worker, whose reference cannot run in a missing folder
        plan_run._reference_job(folder, spec, executors.Local(folder))
    log = folder / plan_run.REFERENCE_JOB / "worker.log"
    assert str(refused.value).startswith("the reference run's job ended without a reference: its worker ended with "
                                         f"exit status 1 (it wrote no reference; see {log})")
    executors.ended_without_verdict(log.parent, "6", "CANCELLED", None)
    assert not (log.parent / "result.json").exists()


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "robust_train.py", project / "train.py")
    return project


def test_slurm_args_without_the_slurm_executor_and_an_unreachable_slurm_are_one_line_errors(tmp_path):
    project = _project(tmp_path)
    res = run_chaosckpt(["suite", "train.py", "--slurm-args", "-p gpu"], cwd=project)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "chaosckpt: error: --slurm-args and [tool.chaosckpt.slurm] are for --executor slurm; add it, or drop them")

    bare = {"PATH": os.path.dirname(sys.executable), "SLURM_CONF": str(tmp_path / "none.conf")}
    res = run_chaosckpt(["suite", "train.py", "--executor", "slurm"], cwd=project, env=bare)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("chaosckpt: error: --executor slurm ") and last.endswith("or use --executor local")
    assert not (project / "chaosckpt-results").exists()  # refused before a suite folder or a reference run
