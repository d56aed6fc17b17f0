"""Shrinking a failed trial (issue 33): the order smaller faults are tried in, and a suite that prints the smallest
one that fails the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
from conftest import REPO, run_chaosckpt

from chaosckpt.conductor.results.result import Finding, Trial
from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial
from chaosckpt.conductor.suite import shrink


def _trial(status: str, lead: str = "torn-checkpoint", save: int = 3, fraction: float = 0.9) -> Trial:
    return Trial(scenario="kill9-mid-save", status=status, headline="", outcome="crashed",
                 params={"trigger": {"save": save, "fraction": fraction, "write": None}},
                 fault={"kind": "halt", "save": save}, findings=[Finding(lead, "...", severity="error")])


def _plan(tmp_path: Path) -> Plan:
    return Plan(args=["train.py"], command=["python", "train.py"], resume_command=["python", "train.py"],
                resume_option=[], workdir=str(tmp_path), results=str(tmp_path), timeout=60.0, tolerance=0.0, nproc=1,
                seed=None, trials=[], reference_key="k", created="")


@pytest.mark.parametrize("failing, tried, smallest", [
    (lambda p: True, [{"save": 1, "fraction": 0.9}, {"save": 1, "write": 1}], {"save": 1, "write": 1}),
    (lambda p: p["save"] == 2 and "write" not in p,
     [{"save": 1, "fraction": 0.9}, {"save": 2, "fraction": 0.9}, {"save": 2, "write": 1},
      {"save": 2, "fraction": 0.225}], {"save": 2, "fraction": 0.225}),
    (lambda p: False, [{"save": 1, "fraction": 0.9}, {"save": 2, "fraction": 0.9}, {"save": 3, "write": 1},
                       {"save": 3, "fraction": 0.225}, {"save": 3, "fraction": 0.45}], None),
], ids=["the first write of save 1", "an earlier fraction of save 2", "nothing smaller"])
def test_earlier_saves_are_tried_first_then_earlier_points_of_the_smallest_that_fails(tmp_path, failing, tried,
                                                                                        smallest):
    planned = PlannedTrial("late", "kill9-mid-save", {"save": 3, "fraction": 0.9})
    ran: List[Dict] = []

    def run(candidate: PlannedTrial, out: Path) -> Trial:
        ran.append(candidate.params)
        return _trial("failed" if failing(candidate.params) else "passed")

    record = shrink.shrink(tmp_path, _plan(tmp_path), planned, _trial("failed"), run)
    assert ran == tried and [t["params"] for t in record["tried"]] == tried
    assert record["params"] == smallest
    assert (record["replay"] is None) == (smallest is None)
    assert json.loads((tmp_path / "trials" / "late" / "shrunk.json").read_text()) == record


def test_a_failure_with_another_leading_finding_is_not_the_same_failure(tmp_path):
    planned = PlannedTrial("late", "kill9-mid-save", {"save": 2})
    record = shrink.shrink(tmp_path, _plan(tmp_path), planned, _trial("failed", save=2),
                           lambda c, out: _trial("failed", lead="in-place-save"))
    assert record["params"] is None and {t["status"] for t in record["tried"]} == {"failed"}


def test_only_failed_kills_and_power_losses_placed_by_hand_or_at_random_are_shrunk(tmp_path):
    plan = _plan(tmp_path)
    assert shrink.shrinkable(PlannedTrial("a", "kill9-mid-save", {"fraction": 0.9}), _trial("failed"), plan)
    assert not shrink.shrinkable(PlannedTrial("b", "kill9-mid-save", {}), _trial("failed"), plan), "placed by default"
    assert not shrink.shrinkable(PlannedTrial("c", "kill9-mid-save", {"save": 3}), _trial("passed"), plan)
    assert not shrink.shrinkable(PlannedTrial("d", "enospc", {"save": 3}), _trial("failed"), plan)
    assert not shrink.shrinkable(PlannedTrial("e", "kill9-mid-save", {"save": 3}, sweep=True), _trial("failed"), plan)


@pytest.mark.e2e
def test_a_failed_late_kill_is_shrunk_to_the_first_write_of_the_first_save_and_no_shrink_leaves_it(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "naive_train.py", project / "train.py")
    (project / "chaosckpt.toml").write_text(
        'command = "train.py"\nscenarios = [{ scenario = "kill9-mid-save", id = "late", params = { save = 3, fraction = 0.9 } }]\n')
    res = run_chaosckpt(["suite", "--json"], cwd=project)
    assert res.returncode == 1, res.stderr
    (trial,) = res.doc["trials"]
    assert trial["smallest"] == "chaosckpt run --scenario kill9-mid-save -p save=1 -p write=1 -- train.py"
    assert f"chaosckpt: late: the smallest fault that fails the same way: {trial['smallest']}" in res.stderr
    folder = Path(res.doc["suite"])
    assert trial["smallest"] in (folder / "summary.md").read_text()
    assert trial["smallest"] in (folder / "junit.xml").read_text()

    again = run_chaosckpt(["suite", "--no-shrink", "--json"], cwd=project)
    assert again.returncode == 1 and "smallest" not in again.doc["trials"][0]
    assert "trying smaller faults" not in again.stderr
