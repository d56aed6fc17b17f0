"""Stored results as the reports read them: a suite folder, a ``chaosckpt run`` folder, or a ``result.json``."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.result import Finding, RunRecord, Trial
from chaosckpt.conductor.runlog import ProcessLog, RunLog


def trial_from_dict(data: Dict[str, Any]) -> Trial:
    """A typed trial from its stored document; keys this version does not know are left out."""
    known = {f.name for f in dataclasses.fields(Trial)}
    values = {k: v for k, v in data.items() if k in known}
    values["findings"] = [
        Finding(f["kind"], f["message"], {k: v for k, v in f.items() if k not in ("kind", "message")})
        for f in data.get("findings", [])
    ]
    run_fields = {f.name for f in dataclasses.fields(RunRecord)}
    values["runs"] = [RunRecord(**{k: v for k, v in r.items() if k in run_fields}) for r in data.get("runs", [])]
    return Trial(**values)


@dataclass
class StoredTrial:
    """One trial of stored results: its verdict (None: not run yet), where its runs are, how to replay it."""

    id: str
    scenario: str
    folder: Path
    trial: Optional[Trial]
    replay: Optional[str] = None

    @property
    def status(self) -> str:
        return self.trial.status if self.trial is not None else "not-run"

    def trainer(self, run: str) -> Optional[ProcessLog]:
        """The training process of one of the trial's runs (``reference``, ``faulted``, ``resume``)."""
        events = self.folder / run / "events"
        return RunLog.read(events).trainer() if events.is_dir() else None

    def saver(self, run: str) -> Optional[ProcessLog]:
        events = self.folder / run / "events"
        return RunLog.read(events).saver() if events.is_dir() else None

    def commands(self) -> List[str]:
        """Each run's command line, as it was started."""
        return [f"{r.name}: {shlex.join(r.command)}" for r in self.trial.runs] if self.trial else []


@dataclass
class Results:
    """What a report shows: the trials, and what they were run on."""

    source: Path
    title: str
    command: str
    created: str
    version: str
    trials: List[StoredTrial] = field(default_factory=list)

    def counts(self) -> Dict[str, int]:
        out = {"passed": 0, "failed": 0, "inconclusive": 0, "not-run": 0}
        for t in self.trials:
            out[t.status] += 1
        return out

    def summary(self) -> str:
        """``3 passed, 1 failed`` (zero counts left out)."""
        return ", ".join(f"{n} {'not run' if k == 'not-run' else k}" for k, n in self.counts().items() if n) or "no trials"


def _suite(folder: Path) -> Results:
    from chaosckpt.conductor.suite import Plan, Suite

    data = json.loads((folder / "suite.json").read_text())
    plan = Plan.from_dict(data)
    suite = Suite(folder, plan)
    results = Results(folder, f"chaosckpt suite {folder.name}", shlex.join(plan.command), plan.created, plan.chaosckpt)
    for planned in plan.trials:
        doc = suite.stored(planned)
        trial = trial_from_dict(doc) if doc is not None else None
        results.trials.append(StoredTrial(planned.id, planned.scenario, suite.trial_dir(planned), trial, plan.replay(planned)))
    return results


def _document(path: Path) -> Results:
    doc = json.loads(path.read_text())
    trials = [trial_from_dict(t) for t in doc.get("trials", [])]
    command = shlex.join(trials[0].runs[0].command) if trials and trials[0].runs else ""
    results = Results(path.parent, f"chaosckpt results {path.parent.name}", command, "", doc.get("chaosckpt", ""))
    for trial in trials:
        folder = Path(trial.results_dir) if trial.results_dir and Path(trial.results_dir).is_dir() else path.parent
        results.trials.append(StoredTrial(trial.scenario, trial.scenario, folder, trial))
    return results


def load(path: Path) -> Results:
    """Results from a suite folder, a ``chaosckpt run`` results folder, or a result document."""
    path = Path(path)
    try:
        if (path / "suite.json").is_file():
            return _suite(path)
        if path.is_dir() and (path / "result.json").is_file():
            return _document(path / "result.json")
        if path.is_file():
            return _document(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read results from {path}: {type(exc).__name__}: {exc}") from None
    raise UsageError(f"{path} holds no chaosckpt results (a suite folder, a run's results folder or a result.json)")
