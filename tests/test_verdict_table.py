"""The verdict-truth table's data covers every bundled example and test job under every scenario."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("verdict_table", REPO / "bench" / "verdict_table.py")
table = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = table  # dataclasses look their module up by name
spec.loader.exec_module(table)


def test_every_example_and_test_job_meets_every_scenario_once():
    scenarios = {p.stem for p in (REPO / "scenarios").glob("*.toml")}
    jobs = {str(p.relative_to(REPO)) for p in [*(REPO / "examples").glob("*.py"), *(REPO / "tests" / "jobs").glob("*.py"),
                                               *(REPO / "tests" / "jobs").glob("*.sh")]}
    assert set(table.SCENARIOS) | set(table.NODE_SCENARIOS) == scenarios
    scenarios -= set(table.NODE_SCENARIOS)
    judged = [*table.JOBS.values(), *table.FRAMEWORK_JOBS.values(), *table.SWEEP_JOBS.values(), *table.SIGNAL_JOBS.values()]
    assert {j.path for j in judged} == jobs
    assert len({(job, scenario) for job, scenario, *_ in table.ROWS}) == len(table.ROWS)
    pairs = {(job, table.scenario_args(scenario)[1]) for job, scenario, *_ in table.ROWS}  # a second row has -p
    assert pairs == {(job, s) for job in table.JOBS for s in scenarios}
    assert {expected for _, _, expected, _, _ in table.ROWS} <= {"PASSED", "FAILED", "REFUSED"}
    refused = {(job, scenario) for job, scenario, expected, _, _ in table.ROWS if expected == "REFUSED"}
    assert refused == {(job, "rank-epoch-skew") for job, j in table.JOBS.items() if j.nproc == 1}  # one rank: exit 2


def test_the_framework_table_has_each_framework_s_defect_and_a_robust_configuration():
    rows = {job: (expected, cause) for job, _, expected, cause, _ in table.FRAMEWORK_ROWS}
    assert set(rows) == set(table.FRAMEWORK_JOBS)
    for job in rows:
        if not job.endswith("_robust"):
            assert rows[job][0] == "FAILED" and rows[job + "_robust"] == ("PASSED", "last-good")


def test_the_cause_is_the_outcome_and_the_first_explaining_finding():
    passed = {"status": "passed", "outcome": "last-good", "findings": [{"kind": "rng-states-missing"}]}
    torn = {"status": "failed", "outcome": "crashed", "findings": [{"kind": "in-place-save"}, {"kind": "torn-checkpoint"}]}
    scratch = {"status": "failed", "outcome": "scratch", "findings": [{"kind": "rng-states-missing"}]}
    stopped = {"status": "inconclusive", "reason": "timeout", "findings": []}
    assert [table.cause(t) for t in (passed, torn, scratch, stopped)] == [
        "last-good", "crashed, torn-checkpoint", "scratch", "inconclusive: timeout"]


def test_every_sweep_job_has_a_sweep_row_beside_a_robust_job_s():
    from chaosckpt.conductor import scenario as scenarios

    rows = {(job, expected) for job, _, expected, _, _ in table.SWEEP_ROWS}
    assert {job for job, _ in rows} - set(table.JOBS) == set(table.SWEEP_JOBS)
    assert any(job in table.JOBS and expected == "PASSED" for job, expected in rows)
    assert all(scenarios.load(table.scenario_args(scenario)[1]).kind.sweepable for _, scenario, *_ in table.SWEEP_ROWS)


def test_a_sweep_s_cause_is_the_first_crash_point_that_did_not_resume_as_last_good():
    points = [{"operation": "fsync ckpt/tmp.pt", "outcome": "last-good (step 4)"},
              {"operation": "write 1024 B to ckpt/tmp.pt", "outcome": None},
              {"operation": "unlink ckpt/last.pt", "outcome": "crashed: unreadable: EOFError"}]
    failed = {"status": "failed", "sweep": points, "findings": []}
    passed = {"status": "passed", "sweep": points[:2], "findings": []}
    unloadable = {"status": "failed", "sweep": points[:2], "findings": []}
    assert [table.cause(t) for t in (failed, passed, unloadable)] == [
        "crashed after unlink ckpt/last.pt", "last-good in every class", "a crash state holds no loadable file"]


def test_a_sweep_s_cause_is_a_resume_that_started_from_the_last_good_checkpoint_but_did_not_reproduce():
    points = [{"operation": "write 1024 B to ckpt/tmp.pt", "outcome": None},
              {"operation": "fsync ckpt/tmp.pt", "outcome": "last-good (step 8), diverged at step 11", "met": False},
              {"operation": "rename ckpt/tmp.pt -> ckpt/last.pt", "outcome": "last-good (step 16)", "met": True}]
    assert table.cause({"status": "failed", "sweep": points, "findings": []}) == (
        "last-good (step 8), diverged at step 11 after fsync ckpt/tmp.pt")
    assert table.cause({"status": "passed", "sweep": points[2:], "findings": []}) == "last-good in every class"


def test_a_row_s_scenario_may_carry_parameters():
    assert table.scenario_args("enospc") == ["-s", "enospc"]
    assert table.scenario_args("enospc -p free_bytes=0") == ["-s", "enospc", "-p", "free_bytes=0"]


def test_every_signal_job_has_a_preemption_row():
    assert {job for job, *_ in table.SIGNAL_ROWS} == set(table.SIGNAL_JOBS)
    assert {table.scenario_args(scenario)[1] for _, scenario, *_ in table.SIGNAL_ROWS} == {"preemption"}
