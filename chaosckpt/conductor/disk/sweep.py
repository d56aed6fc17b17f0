"""The crash-point sweep: crash after every single operation of a save and see what a restart finds.

Crash points are evaluated without rerunning the job: the journal of one faulted
run is replayed up to each point, the crash model gives the disk state, states
that are the same are grouped, and each distinct state's files get a load check.
Full resumes are run for the first few distinct states only (``--max-resumes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.disk.checkpoint_folder import CHECKPOINT_SUFFIXES
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

    def to_dict(self) -> CrashPointRecord:
        return CrashPointRecord(op=self.op, operation=self.operation, state=self.state, files=self.files,
                                outcome=self.outcome)


def describe(op: Optional[dict], name: Callable[[str], str]) -> str:
    """An operation in a few words: ``write 4096 B to ckpt/last.pt.tmp``."""
    if op is None:
        return "before the save's first operation"
    kind = op["op"]
    if kind == "write":
        return f"write {op['len']} B to {name(op.get('path') or '?')}"
    if kind == "rename":
        return f"rename {name(op['src'])} -> {name(op['dst'])}"
    if kind == "open":
        return f"open {name(op['path'])}" + (" (truncate)" if op.get("trunc") and not op.get("created") else "")
    return f"{kind} {name(op.get('path') or '?')}"


@dataclass
class Sweep:
    """The sweep over one save's operations."""

    points: List[CrashPoint] = field(default_factory=list)
    states: List[List[crash.Entry]] = field(default_factory=list)


def explore(initial: crash.Disk, ops: List[dict], first: int, model: crash.Model,
            name: Callable[[str], str]) -> Sweep:
    """Crash after each operation numbered ``first`` .. the last in ``ops`` (``first - 1``: before any)."""
    final = initial.fork()
    for op in ops:
        final.apply(op)
    disk = initial.fork()
    before = [op for op in ops if op["n"] < first]
    window = [op for op in ops if op["n"] >= first]
    for op in before:
        disk.apply(op)
    sweep = Sweep()
    keys: Dict[Tuple, int] = {}
    for op in [None, *window]:
        if op is not None:
            disk.apply(op)
        entries = disk.after_crash(model, final=final)
        key = tuple(e.key() for e in entries)
        if key not in keys:
            keys[key] = len(sweep.states)
            sweep.states.append(entries)
        sweep.points.append(CrashPoint(
            op=op["n"] if op else first - 1,
            operation=describe(op, name),
            state=keys[key],
            files=[{"path": name(e.path), "bytes": e.length} for e in entries],
        ))
    return sweep


def check_states(sweep: Sweep, roots: List[str], scratch: Path, checker: LoadChecker) -> List[Dict[str, Dict]]:
    """Materialize every distinct state under ``scratch`` and load-check its files; per state, name -> result."""
    results = []
    for index, entries in enumerate(sweep.states):
        base = scratch / f"state-{index}"

        def target(path: str, base: Path = base) -> str:
            return str(base / path.lstrip(os.sep))

        crash.materialize(entries, roots, target)
        checked = checker.check([target(e.path) for e in entries if e.path.endswith(CHECKPOINT_SUFFIXES)])
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


def table(points: List[CrashPoint]) -> List[str]:
    """The sweep as text lines: operation, what is on disk, outcome."""
    lines = []
    for p in points:
        disk = ", ".join(
            f"{f['path']} {f['bytes']} B" + ("" if "loads" not in f else (" loads" if f["loads"] else " unreadable"))
            for f in p.files
        ) or "nothing"
        lines.append(f"  op {p.op:>4}  {p.operation:<48} | {disk}" + (f" | {p.outcome}" if p.outcome else ""))
    return lines
