"""The crash-point sweep: crash after every single operation of a save and see what a restart finds.

Crash points are evaluated without rerunning the job: the journal of one faulted
run is replayed up to each point, the crash model gives the disk state, states
that are the same are grouped, and each distinct state's files get a load check.
States a restarted job cannot tell apart (the same names, each loading or not, at
the same step) form a class; one state of each class gets a full resume, up to
``--max-resumes`` classes, and a class left untried keeps the sweep from passing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from chaosckpt.conductor.disk import crash, journal
from chaosckpt.conductor.disk.file_names import CHECKPOINT_SUFFIXES
from chaosckpt.conductor.disk.loadcheck import LoadChecker
from chaosckpt.conductor.results.result import CrashPointRecord


@dataclass
class CrashPoint:
    """One crash point: after which operation, what is on disk, and what became of it."""

    op: int
    operation: str
    state: int
    files: List[Dict]
    outcome: Optional[str] = None
    state_class: Optional[int] = None
    resumed: bool = False
    """A full resume ran on this point's disk state (one state of its class)."""
    met: Optional[bool] = None
    """Whether that resume met the scenario's expectation, judged as a trial's resume is."""

    def to_dict(self) -> CrashPointRecord:
        record = CrashPointRecord(op=self.op, operation=self.operation, state=self.state, files=self.files,
                                  outcome=self.outcome, resumed=self.resumed)
        if self.state_class is not None:
            record["state_class"] = self.state_class
        if self.met is not None:
            record["met"] = self.met
        return record


def first_failed(points: List[CrashPointRecord]) -> Optional[CrashPointRecord]:
    """The first crash point whose resume did not meet the scenario's expectation (in results written before
    ``met`` was recorded: did not resume from the last good checkpoint)."""
    return next((p for p in points if p.get("met") is False
                 or "met" not in p and p["outcome"] and not p["outcome"].startswith("last-good")), None)


def describe(op: Optional[dict], name: Callable[[str], str]) -> str:
    """An operation in a few words: ``write 4096 B to ckpt/last.pt.tmp``."""
    if op is None:
        return "before the save's first operation"
    kind = op["op"]
    if kind == "write":
        return f"write {op['len']} B to {name(op.get('path') or '?')}"
    if kind == "rename":
        return f"rename {name(op['src'])} -> {name(op['dst'])}"
    if kind == "link":
        return f"link {name(op.get('src') or '?')} -> {name(op['path'])}"
    if kind == "open":
        return f"open {name(op['path'])}" + (" (truncate)" if op.get("trunc") and not op.get("created") else "")
    return f"{kind} {name(op.get('path') or '?')}"


@dataclass
class Sweep:
    """The sweep over one save's operations."""

    points: List[CrashPoint] = field(default_factory=list)
    states: List[List[crash.Entry]] = field(default_factory=list)
    """Per state, what the disk holds: the checkpoint's files first, then the others under the roots."""
    whole: List[Dict[str, bool]] = field(default_factory=list)
    """Per state, per path of the checkpoint's files: whether the file holds all the data its version ends with."""
    classes: List[int] = field(default_factory=list)
    """Per state, its class (``classify``)."""
    representatives: List[int] = field(default_factory=list)
    """Per class, the first state in it: the one a resume is run on."""
    refused: List[journal.Refusal] = field(default_factory=list)
    """The journal's operations the disk refused (``crash.Disk.refusal``): no crash point, no part of any state."""


def explore(initial: crash.Disk, ops: List[dict], in_save: Callable[[dict], bool], model: crash.Model,
            name: Callable[[str], str], mine: Callable[[str], bool] = lambda p: True,
            final: Optional[crash.Disk] = None, native: Optional[List[str]] = None) -> Sweep:
    """Crash before the save's first operation and after each of its operations (``in_save``); the others in
    ``ops`` change the disk but are no crash points. A row, and what tells states apart, hold the files ``mine``
    says are the checkpoint's; files the journal never saw written (``crash.unseen``) stand in every state as the
    job left them; an operation the disk refuses is left out, and named in ``refused``. A sweep rebuilt from a
    suite's shared run takes that run's ``final`` disk and ``native`` files (``crash.power_cut`` does the same):
    the copy of its sandbox has other inode numbers than its journal."""
    replayed = initial.fork()
    ops = [op for op in ops if replayed.apply(op)]
    final = replayed if final is None else final
    disk = initial.fork()
    sweep = Sweep(refused=replayed.refused)
    keys: Dict[Tuple, int] = {}
    kept = [crash.as_left(path) for path in (crash.unseen(final) if native is None else native)]
    window = [op for op in ops if in_save(op)]

    def crash_here(op: Optional[dict]) -> None:
        everything = disk.after_crash(model, final=final)
        entries = [e for e in everything if mine(e.path)]
        key = tuple(e.key() for e in entries)
        if key not in keys:  # the checkpoint's files first: a row's files are the first of its state's entries
            keys[key] = len(sweep.states)
            sweep.states.append(entries + [e for e in everything if not mine(e.path)] + kept)
            sweep.whole.append({e.path: _whole(e, final) for e in entries})
        sweep.points.append(CrashPoint(
            op=op["n"] if op else (window[0]["n"] - 1 if window else 0),
            operation=describe(op, name),
            state=keys[key],
            files=[{"path": name(e.path), "bytes": e.length} for e in entries],
        ))

    for op in ops:
        if window and op is window[0]:
            crash_here(None)
        disk.apply(op)
        if in_save(op):
            crash_here(op)
    if not window:
        crash_here(None)
    return sweep


def _whole(entry: crash.Entry, final: crash.Disk) -> bool:
    inode = final.inodes.get(entry.ino) if entry.ino is not None else None
    return inode is not None and entry.version == inode.version and entry.length == inode.size


def check_states(sweep: Sweep, roots: List[str], scratch: Path, checker: LoadChecker,
                 keeps: Optional[str]) -> List[Dict[str, Optional[Dict]]]:
    """Materialize every distinct state under ``scratch`` and load-check its files; per state, name -> result.
    ``keeps``: where the agent kept the data the job's operations destroyed (``crash.Disk.keeps``)."""
    results = []
    for index, entries in enumerate(sweep.states):
        base = scratch / f"state-{index}"
        base.mkdir(parents=True)

        def target(path: str, base: Path = base) -> str:
            return str(base / path.lstrip(os.sep))

        crash.materialize(entries, roots, base, target, keeps)
        checked = checker.check([target(e.path) for e in entries
                                 if e.path in sweep.whole[index] and e.path.endswith(CHECKPOINT_SUFFIXES)])
        results.append({e.path: checked.get(target(e.path)) for e in entries})
    for point in sweep.points:
        result = results[point.state]
        for f, entry in zip(point.files, sweep.states[point.state]):
            check = result.get(entry.path)
            if check is not None:
                f["loads"] = check["ok"]
                if check["ok"] and check.get("progress"):
                    f["progress"] = check["progress"]
                elif not check["ok"]:
                    f["error"] = check["error"]
                if check.get("note"):
                    f["note"] = check["note"]
    return results


def classify(sweep: Sweep, results: List[Dict[str, Optional[Dict]]]) -> None:
    """Group the states (load-checked: ``results``) into classes a restarted job cannot tell apart, in the order
    they first appear; each point gets its state's class."""
    keys: Dict[Tuple, int] = {}
    sweep.classes, sweep.representatives = [], []
    for index, entries in enumerate(sweep.states):
        whole = sweep.whole[index]  # by the checkpoint's files alone
        key = tuple(seen(e, results[index].get(e.path), whole[e.path]) for e in entries if e.path in whole)
        if key not in keys:
            keys[key] = len(sweep.representatives)
            sweep.representatives.append(index)
        sweep.classes.append(keys[key])
    for point in sweep.points:
        point.state_class = sweep.classes[point.state]


def seen(entry: crash.Entry, check: Optional[Dict], whole: bool) -> Tuple:
    """What a restarted job can tell of one file: a link's target; a checkpoint that loads, at its step (by its
    data when it names none); one that does not; an empty file; another file, whole or partial, by its data."""
    if entry.link is not None:
        return (entry.path, "link", entry.link)
    if check is not None and check["ok"]:
        progress = tuple(sorted((check.get("progress") or {}).items()))
        return (entry.path, "loads", progress or (entry.ino, entry.version, entry.length))
    if entry.length == 0:
        return (entry.path, "empty")
    if check is not None:
        return (entry.path, "unreadable")
    return (entry.path, "whole" if whole else "partial", entry.ino, entry.version)


def untried(points: List[CrashPoint]) -> List[int]:
    """The classes no point of which was resumed."""
    tried = {p.state_class for p in points if p.resumed}
    return sorted({p.state_class for p in points if p.state_class is not None} - tried)


def table(points: List[CrashPoint]) -> List[str]:
    """The sweep as text lines: operation, what is on disk, its class, outcome."""
    lines = []
    left = set(untried(points))
    for p in points:
        disk = ", ".join(
            f"{f['path']} {f['bytes']} B" + ("" if "loads" not in f else (" loads" if f["loads"] else " unreadable"))
            for f in p.files
        ) or "nothing"
        if p.state_class is None:
            found = f" | {p.outcome}" if p.outcome else ""
        elif p.resumed:
            found = f" | class {p.state_class}, resumed: {p.outcome}"
        else:
            found = f" | class {p.state_class}" + (", not resumed" if p.state_class in left else "")
        lines.append(f"  op {p.op:>4}  {p.operation:<48} | {disk}{found}")
    return lines
