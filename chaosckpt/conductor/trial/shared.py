"""A faulted run shared by the trials of a suite that fault the job in the same save.

``run_prefix`` runs the job once with the journal on and halts it right after save ``k`` returns (at its
next step), as a power loss just after the save would; the journal, and the write boundaries the agent
reports for that save, say what every trial of that save would have left on disk. ``rebuild`` is the
faulted step of a trial that uses it: the trial's sandbox gets the prefix's files, and

- a kill at a byte or a write of the save: the checkpoint directories rewritten to that crash state (a
  process crash keeps every byte written, the ``none`` model) and the run's events cut there;
- a power loss (just after the save, or after its operation ``op``) or a sweep of the save: the run's
  events cut at that operation and its journal mapped into this sandbox, so that the aftermath, the
  sweep and the lost-checkpoint findings work on them as on the trial's own faulted run.

The trial then goes on to its own resume(s).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import FaultRecord, RunRecord
from chaosckpt.conductor.runs import confinement, sandbox
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.scenario import Scenario
from chaosckpt.conductor.trial import compare
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.fault_files import files_after_fault
from chaosckpt.conductor.trial.faulted import Faulted, caught
from chaosckpt.conductor.trial.options import Stop, TrialOptions
from chaosckpt.conductor.trial.plan import place, run_stop
from chaosckpt.conductor.trial.reference import reference, usable

RECORD = "prefix.json"
"""In the prefix's folder once its run is in: the run's record, its sandbox and checkpoint directories."""
DISK = "disk.json"
"""The checkpoint directories as the journal started them (``crash.Disk``), inode numbers included."""


def shareable(scenario: Scenario, nproc: int) -> Optional[int]:
    """The save a trial faults, when its faulted run can be rebuilt from a shared one: a single-process
    SIGKILL at a byte fraction or a write, or a power loss, or a sweep of either, in a save named by its
    number; None otherwise (a fault that waits for training steps needs the job running on)."""
    trigger = scenario.trigger
    if not scenario.kind.shareable or nproc != 1:
        return None
    if any(getattr(trigger, key, None) is not None for key in ("step", "after", "steps_in_flight")) or trigger.save < 1:
        return None
    return trigger.save


def make_prefix(scenario: Scenario, opts: TrialOptions) -> int:
    """A suite worker's shared run, in ``opts.results_dir``; 0 when it is ready for the trials, else 1 (the
    trials then run their own faulted runs)."""
    try:
        run_prefix(Context(scenario, opts))
    except Stop as stop:
        print(f"chaosckpt: no shared faulted run: {stop.detail}", file=sys.stderr)
        return 1
    return 0


def run_prefix(ctx: Context) -> None:
    """The shared run: the job journaled up to the end of save ``k``, halted there, its sandbox kept."""
    ref = reference(ctx)
    usable(ctx, ref)
    ref_log = ref.log
    place(ctx, ref_log)
    save = ctx.scenario.trigger.save
    work = ctx.sandbox("faulted")
    ckpt_dirs = arming.checkpoint_dirs(ref_log, ctx.opts.ckpt_dirs)
    roots = [str((work / d).resolve()) for d in ckpt_dirs]
    confinement.require_inside(roots, work)
    saver = ref_log.saver()
    if saver is None or len(saver.completed_saves()) < save:
        raise Stop("fault-not-triggered", f"the uninterrupted run did not complete save {save}")
    disk = crash.Disk.scan(roots)
    fault = protocol.fault_spec("halt", save, rank=saver.rank, after_save=True, write_ends=True,
                                track=arming.tracked(roots))
    result = ctx.launch("faulted", ctx.opts.command, work, fault, stop=run_stop(ctx))
    if not result.fault_fired:
        raise Stop("fault-not-triggered", f"the shared run ended without completing save {save}")
    disk.keeps = str(result.events_dir / "keep")
    atomic.write_text(ctx.opts.results_dir / DISK, json.dumps(disk.to_dict()))
    record = dataclasses.asdict(ctx.runs[-1])
    atomic.write_text(ctx.opts.results_dir / RECORD,
                      json.dumps({"work": str(work), "roots": roots, "save": save, "run": record}, indent=2) + "\n")


def ready(prefix: Path) -> bool:
    """Whether the shared run in ``prefix`` is in and its sandbox still there to rebuild trials from."""
    if not (prefix / RECORD).is_file():
        return False
    return Path(json.loads((prefix / RECORD).read_text())["work"]).is_dir()


def rebuild(ctx: Context, armed: Armed, prefix: Path) -> Optional[Faulted]:
    """The faulted step from the shared run, in this trial's sandbox (see the module's docstring). None when
    the journal cannot say it (the save's file was not journaled, the operation is past the shared run's
    end, or a kill in a save written on a background thread, where the shared run's journal has the training
    thread's operations wherever thread timing put them): the trial then runs its own faulted run."""
    stored = json.loads((prefix / RECORD).read_text())
    if ctx.opts.sweep or ctx.scenario.kind.needs_aftermath:
        return _journaled(ctx, armed, prefix, stored)
    initial = crash.Disk.from_dict(json.loads((prefix / DISK).read_text()))
    record = _record(stored)
    log = RunLog.read(Path(record.events))
    proc, step = compare.fault_point(log)
    saves = [s for s in proc.saves if s.index == stored["save"]] if proc is not None else []
    ends = saves[0].ends if saves else None
    if proc is None or not ends or saves[0].path is None or saves[0].thread is not None:
        return None  # a background save's kill is pinned in a run of its own: the training held at its step
    target = saves[0]
    cut = _cut(armed.fault, ends, target.sizes)
    if cut is None:
        return None
    at, write = cut
    state = _crash_state(initial, log.ops(), target, at) if write <= len(ends) else None
    if state is None:
        return None
    entries, applied = state
    moved = _adopt(Path(stored["work"]), armed.work)
    crash.materialize(entries, stored["roots"], armed.work, moved, initial.keeps)
    cut = _cut_at(proc, target, applied, write, at, moved)
    ctx.runs.append(record)
    fault: FaultRecord = {"kind": "halt", "save": target.index, "step": step, "write": write, "bytes": at,
                          "path": rel(cut.saves[-1].path, armed.work), "files": files_after_fault(ctx, cut, armed.work),
                          "shared": str(prefix)}
    return Faulted(None, RunLog([cut]), cut, step, fault, [s for s in cut.saves[:-1] if s.ok])


def _record(stored: dict) -> RunRecord:
    """The shared run's record, as each trial that rebuilt its fault from it lists it: marked shared."""
    return dataclasses.replace(RunRecord(**stored["run"]), shared=True)


def _adopt(prefix_work: Path, work: Path) -> Callable[[str], str]:
    """Make ``work`` a copy of the shared run's sandbox as that run left it; where a path of it is in ``work``."""
    prefix_work = prefix_work.resolve()
    shutil.rmtree(work)
    sandbox.create(prefix_work, work)
    layers = confinement.layers(prefix_work)
    if layers.is_dir():  # what the job wrote into the folders overlaid for it (--map, caches)
        shutil.rmtree(confinement.layers(work), ignore_errors=True)
        shutil.copytree(layers, confinement.layers(work), symlinks=True, ignore=_specials)
    return _mover(prefix_work, work)


def _mover(prefix_work: Path, work: Path) -> Callable[[str], str]:
    """Where a path of the shared run's sandbox is in the trial's sandbox ``work``; other paths stay."""
    prefix_work = prefix_work.resolve()

    def moved(path: str) -> str:
        normal = os.path.normpath(path)  # ``box/../keep`` is not in the sandbox
        inside = normal == str(prefix_work) or normal.startswith(str(prefix_work) + os.sep)
        return str(work.resolve() / os.path.relpath(normal, prefix_work)) if inside else path

    return moved


def _journaled(ctx: Context, armed: Armed, prefix: Path, stored: dict) -> Optional[Faulted]:
    """A power loss or a sweep from the shared run: its events cut at the fault's operation, and its journal
    and its paths mapped into this trial's sandbox (``Armed.disk``, ``end``, ``native``)."""
    record = _record(stored)
    whole = [protocol.read_event_file(path) for path in protocol.event_files(Path(record.events))]
    initial = crash.Disk.from_dict(json.loads((prefix / DISK).read_text()))
    moved = _mover(Path(stored["work"]), armed.work)
    disk, end, native = journal_in(initial, RunLog.of(whole).ops(), moved)
    at_op = armed.fault.get("at_op")
    files = whole if at_op is None else _cut_at_op(whole, at_op)
    if files is None or (native and files is not whole):  # past the shared run's end; or files it cannot date
        return None
    log = RunLog.of([[_moved_event(e, moved) for e in events] for events in files])
    proc, step = compare.fault_point(log)
    if proc is None:
        return None
    _adopt(Path(stored["work"]), armed.work)
    armed.disk, armed.end, armed.native = disk, end, native
    ctx.runs.append(record)
    run = caught(ctx, armed, None, log, proc, step)
    return dataclasses.replace(run, fault={**run.fault, "shared": str(prefix)})


def journal_in(initial: crash.Disk, ops: List[dict], moved: Callable[[str], str]) -> Tuple[crash.Disk, crash.Disk,
                                                                                          List[str]]:
    """A shared run's journal as a trial's sandbox sees it (``moved``): the disk it started from, the disk at its
    end (where each file's data is), and the files it never saw written. The files are told apart in the shared
    run's own sandbox, by the inode numbers its journal recorded; a copy of that sandbox has others."""
    final = initial.fork()
    for op in ops:
        final.apply(op)
    native = crash.unseen(final)
    return initial.relocated(moved), final.relocated(moved), [moved(p) for p in native]


def _cut_at_op(files: List[List[dict]], at_op: int) -> Optional[List[List[dict]]]:
    """The events as a halt after operation ``at_op`` of the faulted save would have left them: the halted
    process's up to that operation and the fault it fires there, the others' up to that moment. None when
    the shared run never made that operation."""
    for events in files:
        fault = next((e for e in events if e["t"] == "fault"), None)
        if fault is None:
            continue
        begin = next((e for e in events if e["t"] == "save-begin" and e["save"] == fault["save"]), None)
        n = (begin or {}).get("op", 0) + at_op
        last = next((i for i, e in enumerate(events) if e["t"] == "op" and e["n"] == n), None)
        if begin is None or last is None:
            return None
        op = events[last]
        halt = {"v": op["v"], "t": "fault", "ts": op["ts"], "pid": op["pid"], "fault": "halt", "save": fault["save"],
                "op": n, "after": op["op"]}
        return [events[: last + 1] + [halt] if e is events else [x for x in e if x["ts"] <= op["ts"]] for e in files]
    return None


def _moved_event(event: dict, moved: Callable[[str], str]) -> dict:
    """One event of the shared run with its paths in the trial's sandbox; without the write boundaries the
    shared run alone asked for."""
    return {k: moved(v) if isinstance(v, str) else v for k, v in event.items() if k != "ends"}


def _cut_at(proc: ProcessLog, target: Save, applied: set, write: int, at: int,
            moved: Callable[[str], str]) -> ProcessLog:
    """The events of the shared run's process as a kill inside save ``target`` would have left them, with the
    paths of the saved files ``moved`` into the trial's sandbox."""
    saves = [dataclasses.replace(s, path=None if s.path is None else moved(s.path),
                                 files=[{**f, "path": moved(f["path"]) if f.get("path") else None} for f in s.files],
                                 moves=[{**m, "src": moved(m["src"]), "dst": moved(m["dst"])} for m in s.moves])
             for s in proc.saves if s.index <= target.index]
    path = saves[-1].path
    event = {"t": "fault", "fault": "halt", "save": target.index, "write": write, "bytes": at, "path": path,
             "ts": target.ts, "pid": proc.pid}
    # the killed call never returned: neither its save-file nor its save-end came
    saves[-1] = dataclasses.replace(saves[-1], ok=None, bytes=0, writes=0, ends=None, files=[], moves=[])
    return dataclasses.replace(proc, fault=event, saves=saves, ops=[op for op in proc.ops if op["n"] in applied],
                               steps=[e for e in proc.steps if e["ts"] <= target.ts],
                               passes=[e for e in proc.passes if e["ts"] <= target.ts], stopped=None)


def _specials(directory: str, names: List[str]) -> List[str]:
    return [n for n in names if sandbox.special(os.lstat(os.path.join(directory, n)).st_mode)]


def _cut(fault: dict, ends: List[int], sizes: List[int]) -> Optional[Tuple[int, int]]:
    """Bytes of the save written when the agent would have fired, and the number of the write it fired in; None
    where it would not have fired (a byte past the end of the file it counts in)."""
    if fault.get("at_write") is not None:
        write = fault["at_write"]
        return (ends[write - 2] if write > 1 else 0), write
    at = fault["at_byte"]
    index = fault.get("file_index")
    if index is not None:
        if index > len(sizes) or at >= sizes[index - 1]:
            return None
        at += sum(sizes[: index - 1])
    return at, bisect.bisect_right(ends, at) + 1


def _crash_state(initial: crash.Disk, ops: List[dict], target: Save, at: int) -> Optional[Tuple[List[crash.Entry], set]]:
    """What a SIGKILL leaves once the save has written ``at`` bytes into its file (opened by the save for a
    path, before it for a file object): every operation before the write that goes past them, the file cut
    there; and the numbers of the operations that happened. None when the journal never saw that write."""
    final = initial.fork()
    for op in ops:
        final.apply(op)
    disk = initial.fork()
    applied: set = set()
    ino: Optional[crash.Ino] = None
    start: Optional[int] = None
    for op in ops:
        key = (int(op["ino"][0]), int(op["ino"][1])) if "ino" in op else None
        if op["op"] == "open" and op["path"] == target.path:
            ino = key
        if op["op"] == "write" and ino is not None and key == ino and op["n"] > (target.op or 0):
            start = op["off"] if start is None else start  # the save's first write: where its bytes begin
            if op["off"] + op["len"] > start + at:
                disk.inodes[ino].size = start + at
                return disk.after_crash("none", final=final), applied
        if not disk.apply(op):  # a journal the disk refuses cannot say it: the trial runs its own faulted run
            return None
        applied.add(op["n"])
    return None

