"""Damaged state through the real command line: each file chaosckpt reads back, cut short or reshaped, is moved
aside with one line naming it, and the command goes on with what is intact (never a traceback, never exit 3)."""

from __future__ import annotations

import json
import sqlite3

from conftest import run_chaosckpt
from stored_results import run_folder

from chaosckpt.conductor.runs import cache


def aside(folder, name):
    return sorted(p.name for p in folder.glob(f"{name}.damaged-*"))


def test_a_truncated_trial_verdict_is_moved_aside_and_the_trial_counts_as_not_run(suite_dir, tmp_path):
    verdict = suite_dir / "trials" / "bad<b>" / "result.json"
    verdict.write_text(verdict.read_text()[:200])
    for _ in range(2):  # the second call finds the file already aside, and says nothing more
        result = run_chaosckpt(["report", str(suite_dir), "--markdown", "s.md"], cwd=tmp_path)
        assert result.returncode == 4, result.stderr  # no trial failed, two never ran: inconclusive
    assert len(aside(verdict.parent, "result.json")) == 1 and not verdict.exists()
    assert "Traceback" not in result.stderr
    assert "1 passed, 2 not run" in (tmp_path / "s.md").read_text()


def test_a_verdict_of_the_wrong_shape_is_moved_aside_too(suite_dir, tmp_path):
    verdict = suite_dir / "trials" / "ok" / "result.json"
    verdict.write_text(json.dumps({"format": 1, "trials": [{"status": 3}]}))
    result = run_chaosckpt(["report", str(suite_dir), "--markdown", "s.md"], cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the report is written; the one trial left with a verdict failed
    [line] = [line for line in result.stderr.splitlines() if "damaged" in line]
    assert str(verdict) in line and aside(verdict.parent, "result.json")


def test_a_truncated_suite_plan_is_moved_aside_for_report_and_resume(suite_dir, tmp_path):
    plan = suite_dir / "suite.json"
    plan.write_text(plan.read_text()[:100])
    result = run_chaosckpt(["report", str(suite_dir)], cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert aside(suite_dir, "suite.json") and "suite.json was damaged" in result.stderr
    again = run_chaosckpt(["report", str(suite_dir)], cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1

    results = tmp_path / "chaosckpt-results" / "20260101-000000-suite"
    results.mkdir(parents=True)
    (results / "suite.json").write_text('{"trials": [')
    (tmp_path / "train.py").write_text("print(1)\n")
    resumed = run_chaosckpt(["suite", "--resume", "--", "train.py"], cwd=tmp_path)
    assert resumed.returncode == 2, resumed.stderr
    assert "no suite to resume" in resumed.stderr and aside(results, "suite.json")


def test_a_result_document_of_an_unknown_format_is_one_line_and_exit_2(tmp_path):
    folder = run_folder(tmp_path)
    doc = json.loads((folder / "result.json").read_text())
    (folder / "result.json").write_text(json.dumps({**doc, "format": 2}))
    result = run_chaosckpt(["report", str(folder)], cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "format 2, which this chaosckpt cannot read" in result.stderr
    (folder / "result.json").write_text(json.dumps(doc)[:150])
    torn = run_chaosckpt(["report", str(folder)], cwd=tmp_path)
    assert torn.returncode == 2 and aside(folder, "result.json") and "Traceback" not in torn.stderr


def test_a_history_of_another_schema_is_moved_aside_and_a_new_one_started(tmp_path):
    folder = tmp_path / ".chaosckpt"
    folder.mkdir()
    db = sqlite3.connect(folder / "history.sqlite")
    db.execute("CREATE TABLE suites (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO suites (name) VALUES ('other')")
    db.commit()
    db.close()
    for _ in range(2):
        result = run_chaosckpt(["history", "--workdir", str(tmp_path)], cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "no suite or run has finished" in result.stdout
    assert len(aside(folder, "history.sqlite")) == 1
    (folder / "history.sqlite").write_bytes(b"not a database at all" * 100)
    result = run_chaosckpt(["history", "--workdir", str(tmp_path), "--json"], cwd=tmp_path)
    assert result.returncode == 0 and json.loads(result.stdout)["scenarios"] == []


def test_a_cache_manifest_of_the_wrong_shape_is_damage_not_a_crash(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    for manifest in ('["run.json"]', '{"run.json": 3}', '{"run.json": [1]}', "{"):
        (tmp_path / cache.MANIFEST).write_text(manifest)
        assert "of another shape" in cache.damage(tmp_path)
    cache.write_manifest(tmp_path)
    assert cache.damage(tmp_path) is None


def test_a_suite_trial_verdict_of_a_newer_format_is_one_line_and_exit_2_and_left_as_it_is(suite_dir, tmp_path):
    """Regression: ``report`` of the suite's folder moved it aside as damaged and exited 0."""
    verdict = suite_dir / "trials" / "ok" / "result.json"
    verdict.write_text(json.dumps({**json.loads(verdict.read_text()), "format": 2}))
    result = run_chaosckpt(["report", str(suite_dir), "--markdown", "s.md"], cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"chaosckpt: error: {verdict} is a result document of format 2, which this chaosckpt "
                           "cannot read (it reads format 1)")
    assert verdict.exists() and aside(verdict.parent, "result.json") == []


def test_a_suite_plan_of_a_newer_format_is_one_line_and_exit_2_and_left_as_it_is(suite_dir, tmp_path):
    plan = suite_dir / "suite.json"
    plan.write_text(json.dumps({**json.loads(plan.read_text()), "format": 2}))
    result = run_chaosckpt(["report", str(suite_dir)], cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"chaosckpt: error: {plan} is a suite plan of format 2, which this chaosckpt cannot read")
    assert plan.exists() and aside(suite_dir, "suite.json") == []
