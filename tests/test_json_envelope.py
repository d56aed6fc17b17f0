"""Every ``--json`` output is one document in the shared envelope, valid against the schema shipped for it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
from conftest import assert_envelope, run_chaosckpt

from chaosckpt.conductor.results import history
from chaosckpt.conductor.results.envelope import COMMANDS, schema
from chaosckpt.conductor.results.result import Trial
from chaosckpt.conductor.results.stored import StoredTrial


def test_every_schema_is_a_valid_draft_2020_12_schema_requiring_the_envelope():
    for command in COMMANDS:
        doc = schema(command)
        jsonschema.Draft202012Validator.check_schema(doc)
        assert doc["required"][:2] == ["format", "chaosckpt"]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"format": 2, "chaosckpt": "0.1.0"}, doc)


def test_scenarios_json(tmp_path):
    res = run_chaosckpt(["scenarios", "--json"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    doc = assert_envelope("scenarios", json.loads(res.stdout))
    names = [s["name"] for s in doc["scenarios"]]
    assert "kill9-mid-save" in names and "enospc" in names
    text = run_chaosckpt(["scenarios"], cwd=tmp_path).stdout
    assert all(f"{name}\n" in text for name in names)


def test_audit_json(tmp_path):
    torch.save({"w": torch.ones(2), "step": 3}, tmp_path / "ok.pt")
    (tmp_path / "torn.pt").write_bytes((tmp_path / "ok.pt").read_bytes()[:100])
    res = run_chaosckpt(["audit", "--json", "ok.pt", "torn.pt"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    doc = assert_envelope("audit", json.loads(res.stdout))
    assert [f["status"] for f in doc["files"]] == ["ok", "findings"]


def test_history_json(tmp_path):
    empty = run_chaosckpt(["history", "--json", "--workdir", str(tmp_path)], cwd=tmp_path)
    assert empty.returncode == 0, empty.stderr
    assert assert_envelope("history", json.loads(empty.stdout))["scenarios"] == []
    trial = Trial("enospc", "passed", "PASSED enospc: resumed", lost_steps=2)
    history.record(tmp_path, "2026-12-01T22:49:39+00:00", tmp_path / "suite", "python train.py", "0.1.0",
                   [StoredTrial("enospc", "enospc", tmp_path, trial), StoredTrial("late", "enospc", tmp_path, None)])
    res = run_chaosckpt(["history", "--json", "--workdir", str(tmp_path)], cwd=tmp_path)
    doc = assert_envelope("history", json.loads(res.stdout))
    assert doc["workdir"] == str(tmp_path.resolve())
    [trend] = doc["scenarios"]
    assert (trend["scenario"], trend["passed"], trend["suites"][0]["started"]) == ("enospc", 1, "2026-12-01T22:49:39+00:00")


@pytest.mark.e2e
def test_run_json_of_an_inconclusive_run(tmp_path):
    (tmp_path / "train.py").write_text("import sys\nsys.exit('no data')\n")
    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--json"], cwd=tmp_path)
    assert res.returncode == 4, res.stderr
    assert res.trial["status"] == "inconclusive" and res.doc["hostname"]
    assert json.loads(next(Path(tmp_path, "chaosckpt-results").glob("*/result.json")).read_text()) == res.doc
