"""``chaosckpt repro``: a failed trial of stored results turned into a bug-report folder, local paths removed."""

from __future__ import annotations

import json
import sys

from conftest import run_chaosckpt
from stored_results import run_folder

from chaosckpt.conductor import scenario as scenarios

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def test_the_first_failed_trial_of_a_suite_becomes_a_report_without_local_paths(suite_dir, tmp_path):
    res = run_chaosckpt(["repro", str(suite_dir)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "chaosckpt-repro-bad_b_"
    assert sorted(p.name for p in folder.iterdir()) == ["ISSUE.md", "evidence.json", "replay.sh", "scenario.toml"]
    issue = (folder / "ISSUE.md").read_text()
    assert "FAILED kill9-mid-save: resumed from the last good checkpoint (step 4) but diverged" in issue
    assert "`rng-not-restored`: the numpy stream was not restored" in issue
    assert "chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.25" in issue
    evidence = json.loads((folder / "evidence.json").read_text())
    assert evidence["id"] == "bad<b>" and evidence["findings"][0]["kind"] == "rng-not-restored"
    for name in ("ISSUE.md", "evidence.json", "replay.sh"):
        assert str(tmp_path) not in (folder / name).read_text()
    pinned = tomllib.loads((folder / "scenario.toml").read_text())
    assert pinned["fault"] == "kill" and pinned["trigger"]["save"] == 2
    assert scenarios.load(str(folder / "scenario.toml")).name == "kill9-mid-save"  # chaosckpt reads it back


def test_a_trial_named_is_reported_and_what_cannot_be_is_one_line(suite_dir, tmp_path):
    named = run_chaosckpt(["repro", str(suite_dir), "ok", "--out", "mine"], cwd=tmp_path)
    assert named.returncode == 0 and (tmp_path / "mine" / "ISSUE.md").is_file()
    for args, word in (([str(suite_dir), "nope"], "no trial nope"),
                       ([str(run_folder(tmp_path / "p", "passed"))], "nothing to report"),
                       ([str(suite_dir), "--out", "mine"], "mine already exists")):
        res = run_chaosckpt(["repro", *args], cwd=tmp_path)
        assert res.returncode == 2 and word in res.stderr and len(res.stderr.strip().splitlines()) == 1
