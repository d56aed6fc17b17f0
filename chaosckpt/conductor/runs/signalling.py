"""Preempting a running job as a scheduler does: a signal (SIGTERM unless told otherwise) to the job's processes,
a grace period for them to save and exit, then the SIGKILL of whatever is left (the launcher's ``kill_tree``).

Slurm signals every process of a job step and SIGKILLs after ``KillWait``; Kubernetes signals the container and
SIGKILLs after ``terminationGracePeriodSeconds``. ``target`` picks who gets the signal here: ``all`` (the launcher
and every rank, as Slurm delivers it) or ``launcher`` (the job's first process only, which must pass it on)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import psutil

from chaosckpt import protocol
from chaosckpt.conductor.runs.runlog import RunLog

TARGETS = ("all", "launcher")
POLL_S = 0.01


@dataclass(frozen=True)
class Preemption:
    """What the scheduler does: which signal, to whom, and how long it waits before the SIGKILL."""

    signal: int
    target: str
    grace_s: float


def signal_named(text: object) -> Optional[int]:
    """The signal ``SIGTERM``, ``TERM``, ``sigusr1`` or ``15`` names, when it is one a job can handle (not SIGKILL
    or SIGSTOP); else None."""
    if isinstance(text, int) and not isinstance(text, bool):
        number = text
    elif isinstance(text, str) and text.strip():
        name = text.strip().upper()
        if name.isdigit():
            number = int(name)
        else:
            found = getattr(signal.Signals, name if name.startswith("SIG") else "SIG" + name, None)
            if found is None:
                return None
            number = int(found)
    else:
        return None
    try:
        named = signal.Signals(number)
    except ValueError:
        return None
    return None if named in (signal.SIGKILL, signal.SIGSTOP) else int(named)


def disposition(pid: int, signum: int) -> str:
    """What process ``pid`` does with ``signum``, as the kernel says: ``handled`` by a handler of its own,
    ``ignored``, or ``default`` (SIGTERM's default ends it at once)."""
    masks: Dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("SigCgt", "SigIgn"):
                    masks[key] = int(value.strip(), 16)
    except (OSError, ValueError):
        return "gone"
    bit = 1 << (signum - 1)
    return "handled" if masks.get("SigCgt", 0) & bit else "ignored" if masks.get("SigIgn", 0) & bit else "default"


def launcher_of(argv: List[str], processes: Dict[int, psutil.Process]) -> Optional[psutil.Process]:
    """The job's first process: the oldest whose command line is the job's (``argv``, or ``argv`` behind the
    interpreter a script's ``#!`` line names), not a confinement wrapper's, whose line only ends with it."""
    found = []
    for proc in processes.values():
        try:
            line, started = proc.cmdline(), proc.create_time()
        except psutil.Error:
            continue
        if _runs(line, argv):
            found.append((started, proc))
    return min(found, key=lambda f: f[0])[1] if found else None


def _runs(line: List[str], argv: List[str]) -> bool:
    """Whether a process's command line is ``argv`` as exec'd: itself, or behind the interpreter of its ``#!``
    line, which the kernel puts before the script's path (``python3 /usr/bin/torchrun ...``)."""
    if line == argv:
        return True
    return (len(line) == len(argv) + 1 and line[2:] == argv[1:]
            and os.path.basename(line[1]) == os.path.basename(argv[0]))


def deliver(preemption: Preemption, argv: List[str], events_dir: Path, processes: Dict[int, psutil.Process],
            ended: Callable[[], bool], deadline: float) -> Dict:
    """Send the signal to the targets, tell the agent that raised the fault's flag to go on, and wait until the
    job ends or the grace period (or the run's ``deadline``) has passed: what was sent to whom, what each did with
    it, and whether the job ended within the grace. The caller SIGKILLs what is left."""
    logged = RunLog.read(events_dir).ranks()
    ranks = {p.pid: processes[p.pid] for p in logged.values() if p.pid in processes}
    launcher = launcher_of(argv, processes)
    targets = dict(ranks) if preemption.target == "all" else {}
    if launcher is not None:
        targets.setdefault(_own(launcher, processes), launcher)
    elif not targets:
        targets = dict(ranks)
    handling = {own: disposition(proc.pid, preemption.signal) for own, proc in {**ranks, **targets}.items()}
    sent_ts = time.time()
    for proc in targets.values():
        try:
            proc.send_signal(preemption.signal)
        except psutil.Error:
            pass
    (events_dir / protocol.SIGNALLED_MARK).touch()
    started = time.monotonic()
    until = min(started + preemption.grace_s, deadline)
    while not ended() and time.monotonic() < until:
        if protocol.fault_flags(events_dir, protocol.STOP_FLAG_PREFIX):
            break  # it trained on to its horizon, where it is held still: nothing more will happen
        time.sleep(POLL_S)
    done = ended()
    return {
        "signal": signal.Signals(preemption.signal).name,
        "target": preemption.target,
        "grace_s": preemption.grace_s,
        "ts": sent_ts,
        "sent_to": sorted(targets),
        "launcher": None if launcher is None else _own(launcher, processes),
        "ranks": {str(p.rank or 0): p.pid for p in logged.values() if p.pid in processes},
        "handling": {str(k): v for k, v in sorted(handling.items())},
        "ended_in_grace": done,
        "ended_after_s": round(time.monotonic() - started, 3) if done else None,
    }


def _own(proc: psutil.Process, processes: Dict[int, psutil.Process]) -> int:
    """The pid the job knows ``proc`` by."""
    return next((own for own, p in processes.items() if p.pid == proc.pid), proc.pid)

