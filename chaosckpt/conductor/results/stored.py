"""Stored results as the reports read them: a suite folder, a ``chaosckpt run`` folder, or a ``result.json``."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from chaosckpt.conductor import params
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic, timestamps
from chaosckpt.conductor.results.suite_plan import SHRUNK, Plan, load_plan, other_format, stored_trial, trial_dir
from chaosckpt.conductor.results.result import Finding, RunRecord, Trial
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog


_FINDING_KEYS = ("kind", "message", "severity", "ignored")


def trial_from_dict(data: Dict[str, Any]) -> Trial:
    """A typed trial from its stored document; keys this version does not know are left out."""
    known = {f.name for f in dataclasses.fields(Trial)}
    values = {k: v for k, v in data.items() if k in known}
    values["findings"] = [
        Finding(f["kind"], f["message"], {k: v for k, v in f.items() if k not in _FINDING_KEYS},
                f.get("severity"), bool(f.get("ignored")))
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
    params: Dict[str, Any] = field(default_factory=dict)
    """The scenario parameters this trial set (a suite's overrides, or a run's trigger)."""
    skipped: Optional[str] = None
    """Why the suite did not run it: the scenario needs more machines or ranks than the job has."""
    smallest: Optional[str] = None
    """The replay line of the smallest fault found that fails the same way (a shrunk trial's ``shrunk.json``)."""

    @property
    def own_runs(self) -> List[RunRecord]:
        """The runs started for this trial alone: not a reference reused from the suite or the cache, nor a
        faulted run the suite shared among trials (``Results.shared_runs``)."""
        return [r for r in self.trial.runs if not r.cached and not r.shared] if self.trial else []

    @property
    def own_time(self) -> float:
        """Seconds this trial's own runs took."""
        return sum(r.duration_s for r in self.own_runs)

    @property
    def status(self) -> str:
        if self.trial is not None:
            return self.trial.status
        return "skipped" if self.skipped else "not-run"

    def trainer(self, run: str) -> Optional[ProcessLog]:
        """The training process of one of the trial's runs (``reference``, ``faulted``, ``resume``)."""
        events = self._events(run)
        return RunLog.read(events).trainer() if events.is_dir() else None

    def saver(self, run: str) -> Optional[ProcessLog]:
        events = self._events(run)
        return RunLog.read(events).saver() if events.is_dir() else None

    def _events(self, run: str) -> Path:
        """The run's events in the trial's folder; else where its record says (a faulted run the suite shared)."""
        events = self.folder / run / "events"
        records = [r for r in self.trial.runs if r.name == run and r.shared] if self.trial else []
        return Path(records[0].events) if records and not events.is_dir() else events

    def crash_points(self) -> List[Dict[str, Any]]:
        """A sweep's crash points as the reports table them: after which operation, what was on disk, and what a
        restarted job found there (empty: not a sweep)."""
        rows = []
        points = (self.trial.sweep or []) if self.trial else []
        tried = {p.get("state_class") for p in points if p.get("resumed")}
        for point in points:
            disk = ", ".join(f"{f['path']} {f['bytes']} B" + ("" if "loads" not in f else " loads" if f["loads"]
                                                                 else " unreadable") for f in point.get("files", []))
            rows.append({"op": point.get("op"), "operation": point.get("operation", ""), "disk": disk or "nothing",
                         "outcome": _found(point, tried)})
        return rows

    def sweep_resumes(self) -> Optional[str]:
        """What the sweep's resumes found, one disk state each: ``2 disk states resumed: last-good (step 4) in 2``;
        None for a trial that is not a sweep."""
        if not self.trial or self.trial.sweep is None:
            return None
        found: Dict[int, str] = {p["state"]: p["outcome"] for p in self.trial.sweep if p.get("outcome")}
        classes = {p["state_class"] for p in self.trial.sweep if "state_class" in p}
        untried = classes - {p.get("state_class") for p in self.trial.sweep if p.get("resumed")}
        left = f", {len(untried)} of {len(classes)} classes of crash state never resumed" if untried else ""
        if not found:
            return "no disk state resumed (load checks only)" + left
        tally: Dict[str, int] = {}
        for outcome in found.values():
            tally[outcome] = tally.get(outcome, 0) + 1
        states = f"{len(found)} disk state{'' if len(found) == 1 else 's'}"
        return f"{states} resumed: " + "; ".join(f"{o} in {n}" for o, n in tally.items()) + left

    def commands(self) -> List[str]:
        """Each run's command line, as it was started."""
        return [f"{r.name}{' (shared by the suite)' if r.shared else ''}: {shlex.join(r.command)}"
                for r in self.trial.runs] if self.trial else []


def _found(point: Mapping[str, Any], tried: set) -> str:
    """What a restarted job made of a crash point: its resume's outcome; else, for a sweep that classed its
    states, whether a state of its class was resumed (results from before classes: a load check only)."""
    if point.get("outcome"):
        return point["outcome"] if "state_class" not in point else f"class {point['state_class']}: {point['outcome']}"
    if "state_class" not in point:
        return "load check only"
    if point["state_class"] in tried:
        return f"class {point['state_class']}: as its resumed state"
    return f"class {point['state_class']}: not resumed"


@dataclass
class Results:
    """What a report shows: the trials, and what they were run on."""

    source: Path
    title: str
    command: str
    created: str
    """When the results were started, ISO 8601 (empty when unknown)."""
    version: str
    trials: List[StoredTrial] = field(default_factory=list)
    hostname: str = ""
    """The machine the trials ran on (empty for results written before chaosckpt recorded it)."""
    seed: Optional[int] = None
    parts: List["Results"] = field(default_factory=list)
    """A combined report's inputs, one per folder given; empty for the results of one folder."""

    @property
    def sources(self) -> List["Results"]:
        """The results of each folder shown: the parts of a combined report, or these results alone."""
        return self.parts or [self]

    def counts(self) -> Dict[str, int]:
        out = {"passed": 0, "failed": 0, "inconclusive": 0, "skipped": 0, "not-run": 0}
        for t in self.trials:
            out[t.status] += 1
        return out

    def shared_runs(self) -> List[RunRecord]:
        """The faulted runs the trials shared, each once (a run is known by its events folder)."""
        runs = {r.events: r for t in self.trials if t.trial for r in t.trial.runs if r.shared}
        return list(runs.values())

    def runs(self) -> int:
        """How many runs of the job the trials took: their own, and each shared run once."""
        return sum(len(t.own_runs) for t in self.trials) + len(self.shared_runs())

    def run_time(self) -> float:
        """Seconds those runs took."""
        return sum(t.own_time for t in self.trials) + sum(r.duration_s for r in self.shared_runs())

    def summary(self) -> str:
        """``3 passed, 1 failed`` (zero counts left out)."""
        return ", ".join(f"{n} {'not run' if k == 'not-run' else k}" for k, n in self.counts().items() if n) or "no trials"


def _suite(folder: Path) -> Results:
    data = load_plan(folder)
    if data is None:
        raise UsageError(f"{folder} holds no chaosckpt results any more: its suite.json was damaged")
    plan = Plan.from_dict(data)
    results = Results(folder, f"chaosckpt suite {folder.name}", shlex.join(plan.command), timestamps.normalized(plan.created),
                      plan.chaosckpt, hostname=data.get("hostname", ""), seed=plan.seed)
    for planned in plan.trials:
        doc = stored_trial(folder, planned)
        trial = trial_from_dict(doc) if doc is not None else None
        results.trials.append(StoredTrial(planned.id, planned.scenario, trial_dir(folder, planned), trial, plan.replay(planned),
                                          dict(planned.params), planned.skipped, _smallest(trial_dir(folder, planned))))
    return results


def _smallest(folder: Path) -> Optional[str]:
    """The replay line of the smallest fault that failed the same way, when the trial was shrunk to one."""
    try:
        replay = json.loads((folder / SHRUNK).read_text()).get("replay")
    except (OSError, ValueError, AttributeError):
        return None
    return replay if isinstance(replay, str) else None


def _trigger(trial: Trial) -> Dict[str, Any]:
    return {k: v for k, v in trial.params.get("trigger", {}).items() if v is not None}


def _replay(trial: Trial) -> Optional[str]:
    """The ``chaosckpt run`` line that runs this trial again, from the job's working directory."""
    runs = {r.name: r.command for r in trial.runs}
    command = runs.get("faulted") or runs.get("reference")
    if not command:
        return None
    argv = ["chaosckpt", "run", "--scenario", trial.scenario]
    for key, value in _trigger(trial).items():
        argv += ["-p", params.param_text(key, value)]
    resume = runs.get("resume")
    if resume and resume != command:
        if resume[: len(command)] == command:
            argv.append(f"--resume-args={shlex.join(resume[len(command):])}")
        else:
            argv.append(f"--resume-cmd={shlex.join(resume)}")
    if trial.tolerance:
        argv += ["--tolerance", f"{trial.tolerance:g}"]
    script = command[1:] if len(command) > 1 and command[1].endswith(".py") and "python" in Path(command[0]).name else command
    return shlex.join([*argv, "--", *script])


def _document(path: Path) -> Results:
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        atomic.set_aside(path, f"{type(exc).__name__}: {exc}")
        raise UsageError(f"{path} held no readable chaosckpt results; it was moved aside") from None
    if not isinstance(doc, dict) or "format" not in doc:
        raise UsageError(f"{path} is no chaosckpt result document (it has no format field)")
    if doc["format"] != 1:
        raise other_format(path, "result document", doc["format"])
    trials = [trial_from_dict(t) for t in doc.get("trials", [])]
    command = shlex.join(trials[0].runs[0].command) if trials and trials[0].runs else ""
    results = Results(path.parent, f"chaosckpt results {path.parent.name}", command, timestamps.of_folder(path.parent),
                      doc.get("chaosckpt", ""), hostname=doc.get("hostname", ""))
    for trial in trials:
        folder = Path(trial.results_dir) if trial.results_dir and Path(trial.results_dir).is_dir() else path.parent
        results.trials.append(StoredTrial(trial.scenario, trial.scenario, folder, trial, _replay(trial), _trigger(trial)))
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


def combine(paths: List[Path]) -> Results:
    """The results of every folder in ``paths`` as one report; trial ids get their folder's name in front."""
    parts = [load(p) for p in paths]
    if len(parts) == 1:
        return parts[0]
    common = Path(os.path.commonpath([str(p.source.resolve()) for p in parts]))
    names = [p.source.name for p in parts]
    if len(set(names)) < len(names):
        names = [os.path.relpath(p.source.resolve(), common) for p in parts]
    combined = Results(common,
                       f"chaosckpt report of {len(parts)} folders ({sum(len(p.trials) for p in parts)} trials)", "", min((p.created for p in parts if p.created), default=""),
                       ", ".join(sorted({p.version for p in parts if p.version})), parts=parts)
    for part, name in zip(parts, names):
        for item in part.trials:
            combined.trials.append(dataclasses.replace(item, id=f"{name}/{item.id}"))
    return combined
