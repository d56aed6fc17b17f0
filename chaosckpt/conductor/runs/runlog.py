"""What one run's event files say, organised per process: steps, saves, loads, the fault."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

from chaosckpt import protocol
from chaosckpt.conductor.disk import journal

Event = Dict[str, Any]


@dataclass
class Save:
    """One checkpoint as the agent saw it: every save call the job made between two steps."""

    index: int
    step: int
    path: Optional[str]
    digest: str
    ts: float
    op: Optional[int] = None  # journal operations before the save began, when the journal was on
    content: List[Event] = field(default_factory=list)  # the agent's findings about the checkpoint's objects
    files: List[Event] = field(default_factory=list)  # ``save-file`` events: one per save call that returned
    ok: Optional[bool] = None  # None: the save never returned (the process died inside it)
    bytes: int = 0
    writes: int = 0
    sizes: List[int] = field(default_factory=list)
    """Bytes of each file it wrote, in the order their first bytes came."""
    error: Optional[str] = None
    ends: Optional[List[int]] = None
    """Where each write of the save ended, in bytes from its start, when the fault asked for them."""
    moves: List[Event] = field(default_factory=list)
    """``save-move`` events: files moved or copied while it was open."""
    rng: Dict[str, str] = field(default_factory=dict)
    """Fingerprints of the random streams when the checkpoint's first save call began."""
    thread: Optional[str] = None
    """The background thread that wrote it (an asynchronous save); None: the training thread."""
    unfinished: bool = False
    """A background thread was still writing it when the process exited: it never landed."""
    waiting: bool = False
    """Unfinished, and not yet begun: handed to its thread, which had written nothing of it at the exit."""
    ended_ts: Optional[float] = None
    """When its ``save-end`` came: None while it never ended (the process died inside it)."""

    def moved_away(self, path: str) -> bool:
        """Whether the save renamed ``path`` to another name (a temporary file put in place), so that ``path``
        no longer held its checkpoint once it ended."""
        return self.landing(path) != path

    def landing(self, path: str) -> str:
        """Where the file the save wrote at ``path`` stands once the save ended: the name a rename gave it, else
        ``path``."""
        return next((m["dst"] for m in self.moves if m["src"] == path and m.get("ok") and not m.get("copied")
                     and m["dst"] != path and m.get("how") != "link"), path)

    def paths(self) -> List[str]:
        """Its files: those its save calls wrote, then those moved or copied in from a file that is none of
        them (a temporary file in ``$TMPDIR`` written from a file object), in order; a move inside a folder it
        saved (DCP's ``.metadata``) is part of that folder. A file that carried a checkpoint serialized into
        memory stands where the save moved it (fsspec's temporary file, moved onto ``last.ckpt``)."""
        out = list(dict.fromkeys(p for p in [self.path, *(self._landed(f) for f in self.files)] if p is not None))
        known = set(out)
        for move in self.moves:
            dst = move["dst"]
            inside = any(dst.startswith(p + os.sep) for p in out)
            if move["src"] in known or inside:
                known.add(dst)
            elif dst not in known:
                known.add(dst)
                out.append(dst)
        return out


    def _landed(self, file: Event) -> Optional[str]:
        path = file.get("path")
        if not file.get("memory"):
            return path
        for move in self.moves:
            if move["src"] == path and move.get("ok") and move["how"] not in ("copy", "link"):
                path = move["dst"]
        return path


@dataclass
class ProcessLog:
    """The events of one process of the job."""

    pid: int
    rank: Optional[int] = None
    hello: Optional[Event] = None
    steps: List[Event] = field(default_factory=list)
    saves: List[Save] = field(default_factory=list)
    loads: List[Event] = field(default_factory=list)
    restores: List[Event] = field(default_factory=list)
    fault: Optional[Event] = None
    ops: List[Event] = field(default_factory=list)
    dropped: List[journal.Refusal] = field(default_factory=list)
    """``op`` events that are not of the agent's shape (``journal.malformed``), left out of ``ops``."""
    passes: List[Event] = field(default_factory=list)
    """``sampler`` events: one per DataLoader pass, in order."""
    stopped: Optional[int] = None
    """The steps it had taken when its horizon stopped it; None when it was not stopped there."""
    uncaught: Optional[Event] = None
    """The exception the process ended on, if it ended on one."""
    ended: bool = False
    """Its script ended (the ``exit`` event): a death after this struck the interpreter's shutdown."""
    refused: List[Event] = field(default_factory=list)
    """``refused`` events: writes the system refused with EROFS (a read-only mount: outside the sandbox)."""
    background_error: Optional[Event] = None
    """The error a fault raised in a background save, and its ``fate``: observed by the job, or never."""
    handoffs: List[Event] = field(default_factory=list)
    """``save-handoff`` events: the states it handed to DCP's checkpoint process, in order."""
    helpers: List[int] = field(default_factory=list)
    """The pids of the checkpoint processes whose saves, operations and fault are folded into this one's."""

    def shown(self, path: str) -> str:
        """``path`` as the user knows it: relative to the process's working directory when inside it."""
        cwd = (self.hello or {}).get("cwd") or ""
        return os.path.relpath(path, cwd) if cwd and path.startswith(cwd + os.sep) else path

    def first_digest(self) -> Optional[str]:
        return self.steps[0].get("digest") if self.steps else None

    def paths(self) -> List[str]:
        """Every file (or DCP folder) the job saved to, in the order of its first save there."""
        out: List[str] = []
        for save in self.saves:
            for path in save.paths():
                if path not in out:
                    out.append(path)
        return out

    def completed_saves(self, before: Optional[float] = None) -> List[Save]:
        return [s for s in self.saves if s.ok and (before is None or s.ts <= before)]


def _process(events: List[Event]) -> ProcessLog:
    log = ProcessLog(pid=events[0]["pid"])
    by_index: Dict[int, Save] = {}
    for e in events:
        kind = e["t"]
        if kind.startswith("save-") and kind != "save-handoff":
            _on_save(log, by_index, e)
        elif kind == "hello":
            log.hello = e
            log.rank = e.get("rank")
        elif kind == "step" and not e.get("skipped"):
            log.steps.append(e)
        elif kind == "load":
            log.loads.append(e)
        elif kind == "restore":
            log.restores.append(e)
        elif kind == "fault":
            log.fault = e
        elif kind == "op":
            malformed = journal.malformed(e)
            if malformed is None:
                log.ops.append(e)
            else:
                log.dropped.append(malformed)
        elif kind == "sampler":
            log.passes.append(e)
        elif kind == "stop":
            log.stopped = e["step"]
        elif kind == "uncaught":
            log.uncaught = e
        elif kind == "exit":
            log.ended = True
            log.background_error = e.get("background_error", log.background_error)
        elif kind == "background-error":
            log.background_error = e
        elif kind == "refused":
            log.refused.append(e)
        elif kind == "save-handoff":
            log.handoffs.append(e)
    if log.ended:
        for save in log.saves:
            if save.ok is None:  # a thread still inside it when the process exited: it never landed
                save.ok, save.unfinished = False, True
    return log


def _on_save(log: ProcessLog, by_index: Dict[int, Save], e: Event) -> None:
    """One ``save-*`` event of a checkpoint (``by_index``: the process's checkpoints by their number)."""
    kind = e["t"]
    if kind == "save-begin":
        if e["save"] in by_index and by_index[e["save"]].unfinished:
            return  # its thread began it in the interpreter's shutdown, after the exit reported it unfinished
        save = Save(index=e["save"], step=e["step"], path=e.get("path"), digest=e["digest"], ts=e["ts"],
                    op=e.get("op"), rng=e.get("rng", {}), thread=e.get("thread"))
        by_index[save.index] = save
        log.saves.append(save)
        return
    save = by_index.get(e["save"])
    if save is None:
        return
    if kind == "save-end":
        save.ok, save.bytes, save.writes, save.error = e["ok"], e["bytes"], e["writes"], e.get("error")
        save.sizes = e.get("sizes", [])
        save.content = e.get("content", [])
        save.unfinished, save.waiting = bool(e.get("unfinished")), bool(e.get("waiting"))
        save.ended_ts = e["ts"]
    elif kind == "save-file":
        save.files.append(e)
        save.ends = e.get("ends") if len(save.files) == 1 else None  # a shared run rebuilds one-file checkpoints
    elif kind == "save-thread":
        save.thread = e["thread"]
    elif kind == "save-move":
        save.moves.append(e)


def _fold_helpers(processes: List[ProcessLog]) -> List[ProcessLog]:
    """DCP's checkpoint process (``async_save`` in process mode) writes the checkpoints of the rank that started
    it, which hands it one staged state after another: its k-th checkpoint is of the step (and parameters) of the
    rank's k-th handoff. Its saves, file operations and fault become the rank's, as a thread's would."""
    by_pid = {p.pid: p for p in processes}
    kept = []
    for proc in processes:
        parent = by_pid.get((proc.hello or {}).get("helper_of"))
        if parent is None or proc.steps or parent.saves and not parent.helpers:
            kept.append(proc)
            continue
        for save, handoff in zip(proc.saves, parent.handoffs):
            save.step, save.digest = handoff["step"], handoff["digest"]
        parent.saves.extend(proc.saves)
        parent.ops = sorted(parent.ops + proc.ops, key=lambda e: (e["ts"], e["pid"], e["n"]))
        parent.dropped.extend(proc.dropped)
        parent.fault = parent.fault or proc.fault
        parent.refused.extend(proc.refused)
        parent.helpers.append(proc.pid)
    return kept


_FILE_OPS = ("open", "write", "rename", "link", "unlink", "symlink")
"""Journal operations that name a file (a folder's fsync, mkdir and rmdir name its folder, which may hold the job's
other files)."""


@dataclass
class RunLog:
    """All processes of one run that had the agent live in them."""

    processes: List[ProcessLog]

    @classmethod
    def read(cls, run_dir: Path) -> "RunLog":
        return cls.of(protocol.read_event_file(path) for path in protocol.event_files(run_dir))

    @classmethod
    def of(cls, files: Iterable[List[Event]]) -> "RunLog":
        """The run from the events of each of its event files (a suite cuts a shared run's at its trials' faults)."""
        return cls(_fold_helpers([_process(events) for events in files if events]))

    @property
    def agent_loaded(self) -> bool:
        return bool(self.processes)

    def trainer(self) -> Optional[ProcessLog]:
        """The process that trained: rank 0 (or the only rank) among those that took steps."""
        training = [p for p in self.processes if p.steps]
        if not training:
            return None
        return min(training, key=lambda p: (p.rank or 0, p.steps[0]["ts"]))

    def saver(self) -> Optional[ProcessLog]:
        """The process whose saves count: the trainer, else any process that saved."""
        trainer = self.trainer()
        if trainer is not None and trainer.saves:
            return trainer
        saving = [p for p in self.processes if p.saves]
        return saving[0] if saving else trainer

    def fault(self) -> Optional[Event]:
        for p in self.processes:
            if p.fault is not None:
                return p.fault
        return None

    def ops(self) -> List[Event]:
        """Journal operations of every process, in the order they happened."""
        return sorted((e for p in self.processes for e in p.ops), key=lambda e: (e["ts"], e["pid"], e["n"]))

    def save_ops(self) -> List[Event]:
        """Journal operations of the processes that save (each rank's training process), in the order they
        happened: another process's writes (a data-preparation step) are none of the checkpoint's."""
        pids = {pid for p in self.ranks().values() for pid in (p.pid, *p.helpers)}
        return [e for e in self.ops() if e["pid"] in pids]

    def checkpoint_files(self) -> Callable[[str], bool]:
        """Whether a path is one of the checkpoint's files: one its saves wrote, moved or linked, one the saving
        processes changed while a checkpoint was open, or a file inside a folder a save wrote or moved (DCP's).
        The job's scripts and input data beside them, in a checkpoint folder that is the working directory, are
        not."""
        names = set()
        for proc in self.ranks().values():
            for save in proc.saves:
                names.update(save.paths())
                names.update(path for move in save.moves for path in (move["src"], move["dst"]))
            for op in proc.ops:
                if op.get("save") is not None and op["op"] in _FILE_OPS:
                    names.update(op[k] for k in ("path", "src", "dst") if op.get(k))
        folders = tuple(name + os.sep for name in names)
        return lambda path: path in names or path.startswith(folders)

    def ranks(self) -> Dict[int, ProcessLog]:
        """The training process of each rank (a job without ranks is rank 0): one that stepped, the last started."""
        out: Dict[int, ProcessLog] = {}
        for proc in sorted(self.processes, key=lambda p: (bool(p.steps), p.hello["ts"] if p.hello else 0.0)):
            if proc.steps or proc.passes or proc.saves:
                out[proc.rank or 0] = proc
        return dict(sorted(out.items()))

    def world_size(self) -> int:
        """How many ranks the job ran with, as its processes say."""
        sizes = [p.hello.get("world_size") or 1 for p in self.processes if p.hello]
        return max(sizes + [len(self.ranks()), 1])

    def dropped_ops(self) -> List[journal.Refusal]:
        """The ``op`` events of every process left out as malformed."""
        return [r for p in self.processes for r in p.dropped]

    def refused(self) -> List[str]:
        """The paths of every write the system refused, in the order of their processes' files."""
        return [path for p in self.processes for e in p.refused for path in e.get("paths", [])]

    def failed_loads(self) -> List[Event]:
        return [e for p in self.processes for e in p.loads if not e["ok"]]
