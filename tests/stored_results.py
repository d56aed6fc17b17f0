"""Stored results written as chaosckpt writes them, for the tests that read them back (reports, damaged state)."""

from __future__ import annotations

import json
from pathlib import Path

from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial


def events(folder: Path, steps: int, first: int = 1, saves=(), bump: float = 0.0) -> None:
    """An event file as the agent writes it: ``steps`` steps of a decreasing loss, and completed ``saves``."""
    (folder / "events").mkdir(parents=True)
    lines = [{"v": 1, "t": "hello", "ts": 0.0, "pid": 7, "rank": None}]
    for i in range(steps):
        step = first + i
        lines.append({"v": 1, "t": "step", "ts": float(step), "pid": 7, "step": i + 1, "opt": 0,
                      "loss": [1.0 / step + (bump if step > 6 else 0.0)], "rng": {}})
        if step in saves:
            lines.append({"v": 1, "t": "save-begin", "ts": step + 0.5, "pid": 7, "save": saves.index(step) + 1, "step": step,
                          "path": "/x/ckpt.pt", "digest": f"d{step}"})
            lines.append({"v": 1, "t": "save-end", "ts": step + 0.6, "pid": 7, "save": saves.index(step) + 1, "ok": True,
                          "bytes": 100, "writes": 3})
    (folder / "events" / "events.x.7.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))


def trial_doc(status: str, headline: str, folder: Path, **fields) -> dict:
    runs = [{"name": n, "command": ["python", "train.py"], "returncode": 0, "duration_s": 1.5, "timed_out": False,
             "fault_fired": n == "faulted", "survivors": 0, "stdout": "", "stderr": "", "events": str(folder / n / "events")}
            for n in ("reference", "faulted", "resume")]
    return {"format": 1, "trials": [{"scenario": "kill9-mid-save", "status": status, "headline": headline,
                                     "params": {"trigger": {"save": 2, "fraction": 0.5, "write": None}}, "runs": runs,
                                     "results_dir": str(folder), "findings": [], **fields}]}


def stored_suite(tmp_path: Path) -> Path:
    """A stored suite of three trials: one passed, one failed (diverged, with a finding), one never run."""
    folder = tmp_path / "suite"
    plan = Plan(args=["train.py"], command=["python", "train.py"], resume_command=["python", "train.py"], resume_option=[],
                workdir=str(tmp_path), results=str(tmp_path), timeout=3600.0, tolerance=0.0, nproc=1, seed=None,
                trials=[PlannedTrial("ok", "kill9-mid-save", {}), PlannedTrial("bad<b>", "kill9-mid-save", {"save": 2, "fraction": 0.25}),
                        PlannedTrial("later", "kill9-mid-save", {})],
                reference_key="k", created="2026-11-30 02:00:00")
    folder.mkdir()
    (folder / "suite.json").write_text(json.dumps(plan.to_dict()))
    ok, bad = folder / "trials" / "ok", folder / "trials" / "bad<b>"
    for trial_folder, bump in ((ok, 0.0), (bad, 0.3)):
        events(trial_folder / "reference", 12, saves=(4, 8, 12))
        events(trial_folder / "faulted", 8, saves=(4,))
        events(trial_folder / "resume", 8, first=5, bump=bump)
    fault = {"save": 2, "write": 2, "bytes": 50, "step": 8, "path": "ckpt.pt", "files": {}}
    (ok / "result.json").write_text(json.dumps(trial_doc(
        "passed", "PASSED kill9-mid-save: resumed from the last good checkpoint (step 4) and reproduced all 8 following steps bitwise",
        ok, fault=fault, last_good_step=4, recovered_step=4, outcome="last-good", lost_steps=4, reproduced=True, compared_steps=8)))
    (bad / "result.json").write_text(json.dumps(trial_doc(
        "failed", "FAILED kill9-mid-save: resumed from the last good checkpoint (step 4) but diverged from the uninterrupted run at step 7 <script>",
        bad, fault={**fault, "in_file": True}, last_good_step=4, recovered_step=4, outcome="last-good", lost_steps=4, reproduced=False,
        first_divergent_step=7, max_loss_diff=0.3, compared_steps=8,
        findings=[{"kind": "rng-not-restored", "message": "the numpy stream was not restored", "stream": "numpy"}])))
    return folder


def run_folder(tmp_path: Path, status: str = "failed", findings=()) -> Path:
    """A ``chaosckpt run`` results folder as the command names it, its reference reused from the cache; ``findings``
    as the result document holds them."""
    folder = tmp_path / "results" / "20261201-224939-kill9-mid-save"
    for run, steps, first in (("reference", 12, 1), ("faulted", 8, 1), ("resume", 8, 5)):
        events(folder / run, steps, first=first, saves=(4, 8, 12))
    doc = trial_doc(status, f"{status.upper()} kill9-mid-save: resumed from the last good checkpoint (step 4)", folder,
                    last_good_step=4, recovered_step=4, outcome="last-good", lost_steps=4, findings=list(findings))
    doc["trials"][0]["runs"][0].update(cached=True, duration_s=30.0)
    doc["trials"][0]["runs"][2]["command"] = ["python", "train.py", "--resume"]
    doc["hostname"] = "node-7"
    (folder / "result.json").write_text(json.dumps(doc))
    return folder
