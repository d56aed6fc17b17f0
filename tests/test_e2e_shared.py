"""A suite's kills, power losses and sweeps inside one save share one journaled faulted run: the verdicts are
those of trials run alone (with their own faulted runs, with a fresh and a cached reference, as ``chaosckpt run``),
and the job runs up to the fault once. ``bench/equivalence.py`` checks the same on every row of the verdict table."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO, run_chaosckpt
from test_verdict_table import table

pytestmark = pytest.mark.e2e
sys.path.insert(0, str(REPO / "bench"))
import equivalence  # noqa: E402  (the bench's signature of a verdict)

KILLS = """
command = "train.py --epochs 2"
[[scenarios]]
scenario = "kill9-mid-save"
id = "early"
params = { save = 2, fraction = 0.05 }
[[scenarios]]
scenario = "kill9-mid-save"
id = "second-write"
params = { save = 2, write = 2 }
"""


POWER_LOSSES = """
command = "train.py --epochs 2"
[[scenarios]]
scenario = "power-loss"
id = "returned"
params = { save = 2 }
[[scenarios]]
scenario = "power-loss"
id = "strict-op-2"
params = { save = 2, op = 2, model = "strict" }
[[scenarios]]
scenario = "power-loss"
id = "sweep"
params = { save = 2, model = "strict" }
sweep = true
"""
"""The power losses of save 2 of the naive job, and the sweep of it that once resumed a disk of the shared run's
end in every crash state ("last-good (step 32)" where nothing was ever fsynced)."""


def suite(tmp_path: Path, job: str, *flags: str, config: str = KILLS) -> Path:
    """Run the trials of ``config`` (the two kills of save 2) on ``job``; the suite's folder."""
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        shutil.copy(REPO / "examples" / job, project / "train.py")
        (project / "chaosckpt.toml").write_text(config)
    res = run_chaosckpt(["suite", *flags], cwd=project)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return sorted((project / "chaosckpt-results").glob("*-suite*"))[-1]


def verdicts(folder: Path) -> Dict[str, tuple]:
    out = {}
    for trial in json.loads((folder / "result.json").read_text())["trials"]:
        fault = trial["fault"]
        out[Path(trial["results_dir"]).name] = (
            trial["status"], trial["outcome"], trial["recovered_step"], trial["lost_steps"], trial["last_good_step"],
            trial["reproduced"], fault["save"], fault["step"], fault["bytes"], fault["write"], fault["path"],
            fault["files"], trial["error"], trial["error_path"], sorted(f["kind"] for f in trial["findings"]))
    return out


def faulted_runs(folder: Path) -> List[str]:
    """The events folder of every trial's faulted run."""
    runs = []
    for trial in json.loads((folder / "result.json").read_text())["trials"]:
        runs += [r["events"] for r in trial["runs"] if r["name"] == "faulted"]
    return runs


def test_kills_in_one_save_share_one_faulted_run_and_get_the_verdicts_of_trials_run_alone(tmp_path):
    """On the robust job (a false alarm is the costlier error); the power-loss test below shares a failing one."""
    shared = suite(tmp_path, "robust_train.py")
    alone = suite(tmp_path, "robust_train.py", "--no-share")

    assert verdicts(shared) == verdicts(alone)
    assert {v[0] for v in verdicts(shared).values()} == {"passed"}
    assert len({v[8] for v in verdicts(shared).values()}) == 2  # two different crash points
    runs = faulted_runs(shared)
    assert len(runs) == 2 and len(set(runs)) == 1
    assert Path(runs[0]).is_relative_to(shared / "prefixes" / "save-2")
    assert [p.name for p in (shared / "prefixes").iterdir()] == ["save-2"]
    assert not (shared / "prefixes" / "save-2" / "sandboxes").exists()
    assert not any((shared / "trials" / name / "faulted").exists() for name in verdicts(shared))
    assert len(set(faulted_runs(alone))) == 2 and not (alone / "prefixes").exists()


def test_power_losses_and_a_sweep_in_one_save_share_one_faulted_run_and_get_the_verdicts_of_trials_run_alone(
        tmp_path):
    shared = suite(tmp_path, "naive_train.py", config=POWER_LOSSES)
    alone = suite(tmp_path, "naive_train.py", "--no-share", config=POWER_LOSSES)
    res = run_chaosckpt(["run", "--json", "-s", "power-loss", "-p", "save=2", "-p", "model=strict", "--sweep", "--",
                         "train.py", "--epochs", "2"], cwd=tmp_path / "project")
    run = json.loads(res.stdout)["trials"][0]

    def judged(folder: Path) -> Dict[str, tuple]:
        out = {}
        for trial in json.loads((folder / "result.json").read_text())["trials"]:
            fault = {k: v for k, v in trial["fault"].items() if k != "shared"}
            out[Path(trial["results_dir"]).name] = (
                trial["status"], trial["outcome"], trial["recovered_step"], trial["lost_steps"], trial["last_good_step"],
                trial["reproduced"], trial["error"], trial["error_path"], fault, trial["sweep"],
                [(f["kind"], f["message"]) for f in trial["findings"]])
        return out

    assert judged(shared) == judged(alone)
    assert {v[0] for v in judged(shared).values()} == {"failed"}
    assert all("acknowledged-checkpoint-lost" in [f[0] for f in v[-1]] for k, v in judged(shared).items() if k != "sweep")
    assert judged(shared)["strict-op-2"][8]["op"] != judged(shared)["returned"][8].get("op")
    sweep = next(t for t in json.loads((shared / "result.json").read_text())["trials"]
                 if Path(t["results_dir"]).name == "sweep")
    assert equivalence.signature(sweep) == equivalence.signature(run)
    assert {p["outcome"] for p in sweep["sweep"]} == {"scratch (step 0)"}  # nothing of the naive save was fsynced
    runs = faulted_runs(shared)
    assert len(runs) == 3 and len(set(runs)) == 1 and Path(runs[0]).is_relative_to(shared / "prefixes" / "save-2")
    assert not (shared / "prefixes" / "save-2" / "sandboxes").exists()
    assert len(set(faulted_runs(alone))) == 3


def test_a_verdict_table_row_gives_one_verdict_alone_cached_in_a_shared_suite_and_in_one_of_its_own(tmp_path):
    """The scheduler job's kill (its LR schedule not saved: the resume diverges two steps after the checkpoint it
    took) run the four ways of bench/equivalence.py: alone (``chaosckpt run --fresh-reference``), cached (``chaosckpt
    run`` again, its reference from the cache the first one filled), in a shared suite (whose configuration, a new
    source of the job, makes it run its reference anew and cache it) and in a suite of its own (``--no-share``, whose
    reference is that cached one). Its sweep, each state judged as this resume is, is a row of the verdict table."""
    job = table.JOBS["scheduler_job"]
    got = equivalence.run_ways(job, "kill9-mid-save", False, tmp_path)

    expected = next(f"{verdict}: {cause}" for key, scenario, verdict, cause, _ in table.ROWS
                    if key == "scheduler_job" and scenario == "kill9-mid-save")
    assert equivalence.judge(got) == (True, expected)
    assert got["alone"]["first_divergent_step"] == got["suite"]["first_divergent_step"] == 11
    assert got["suite"]["fault"].get("shared")
    assert "shared" not in got["no-share"]["fault"]
    assert set(got) == {"alone", "cached", "suite", "no-share"}
    assert [r.get("cached", False) for r in got["cached"]["runs"]][:1] == [True]
    assert [r.get("cached", False) for r in got["alone"]["runs"]][:1] == [False]
    shared, own = sorted((tmp_path / "results").glob("*-suite*"))  # the suite of its own took the cached reference
    assert json.loads((own / "reference" / "run.json").read_text()) == json.loads(
        (shared / "reference" / "run.json").read_text())


OWN_PATH = """
command = "train.py"
[[scenarios]]
scenario = "kill9-mid-save"
id = "k"
[[scenarios]]
scenario = "kill9-mid-save"
id = "a-trial-whose-id-is-long-enough-to-move-its-sandbox-past-a-64-byte-boundary"
"""
"""Two trials of one kill (half of save 2) whose sandboxes' paths differ in length by 70 characters."""


def test_one_kill_in_a_job_that_writes_its_own_path_into_its_checkpoints_cuts_one_file_in_every_sandbox(tmp_path):
    """own_path_job.py's files grow by 64 bytes in a longer folder, and half of its save 2 is the first byte of
    current.pt: counted across the save, the trial whose sandbox path is long cut step_16.pt 64 bytes short instead,
    and its resume went on from step 8 (PASSED) where the other's crashed (own_path_job.truth.md). Placed in the
    file that held that byte in the reference run, both cut current.pt at its first byte."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "tests" / "jobs" / "own_path_job.py", project / "train.py")
    (project / "chaosckpt.toml").write_text(OWN_PATH)
    res = run_chaosckpt(["suite", "--no-shrink", "--json"], cwd=project)
    assert res.returncode == 1, res.stdout + res.stderr
    trials = [t["result"] for t in json.loads(res.stdout)["trials"]]
    assert len(trials) == 2 and len({equivalence.signature(t) for t in trials}) == 1
    assert [(t["fault"]["path"], t["fault"]["bytes"]) for t in trials] == [("ckpt/current.pt", 0)] * 2
    assert trials[0]["status"] == "failed" and trials[0]["outcome"] == "crashed"
    assert table.cause(trials[0]) == "crashed, resume-chose-incomplete"
