"""A suite's kills and power losses inside one save share one journaled faulted run: the verdicts are those
of trials run alone, and the job runs up to the fault once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO, run_chaosckpt

pytestmark = pytest.mark.e2e

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
"""


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


def test_power_losses_in_one_save_share_one_faulted_run_and_get_the_verdicts_and_findings_of_trials_run_alone(tmp_path):
    shared = suite(tmp_path, "naive_train.py", config=POWER_LOSSES)
    alone = suite(tmp_path, "naive_train.py", "--no-share", config=POWER_LOSSES)

    def judged(folder: Path) -> Dict[str, tuple]:
        out = {}
        for trial in json.loads((folder / "result.json").read_text())["trials"]:
            fault = {k: v for k, v in trial["fault"].items() if k != "shared"}
            out[Path(trial["results_dir"]).name] = (
                trial["status"], trial["outcome"], trial["recovered_step"], trial["lost_steps"], trial["last_good_step"],
                trial["reproduced"], trial["error"], trial["error_path"], fault,
                [(f["kind"], f["message"]) for f in trial["findings"]])
        return out

    assert judged(shared) == judged(alone)
    assert {v[0] for v in judged(shared).values()} == {"failed"}
    assert all("acknowledged-checkpoint-lost" in [f[0] for f in v[-1]] for v in judged(shared).values())
    assert judged(shared)["strict-op-2"][8]["op"] != judged(shared)["returned"][8].get("op")
    runs = faulted_runs(shared)
    assert len(runs) == 2 and len(set(runs)) == 1 and Path(runs[0]).is_relative_to(shared / "prefixes" / "save-2")
    assert not (shared / "prefixes" / "save-2" / "sandboxes").exists()
    assert len(set(faulted_runs(alone))) == 2
