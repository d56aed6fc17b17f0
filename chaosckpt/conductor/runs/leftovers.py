"""What a chaosckpt process killed outright (SIGKILL, OOM, a lost machine) leaves behind, found and removed.

Every results folder is claimed with a lock (``.lock``) for as long as its
process lives and the lock file is removed when it ends normally. A folder
whose lock file is there but whose lock is free belongs to a run that died: its
sandboxes are removed and any job process still running from it is killed, on
the next ``run`` or ``suite`` in the same results folder or by ``chaosckpt clean``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import psutil

from chaosckpt import protocol
from chaosckpt.conductor.runs import diskspace, locks, slurm

LOCK = ".lock"
TRASH = ".removing-"
"""Prefix a sandbox is renamed to, in one atomic step, before it is removed: whatever interrupts the removal,
what is left is found by this name, lock or no lock, and its removal finished."""
_held: Dict[Path, int] = {}


def claim(folder: Path) -> None:
    """Own ``folder`` until this process exits; raises ``locks.Busy`` when a live process owns it."""
    folder = Path(folder).resolve()
    if folder in _held:
        return
    _held[folder] = locks.acquire(folder / LOCK)
    if len(_held) == 1:
        atexit.register(release_all)


def owned() -> Optional[Path]:
    """The results folder this process claimed last, if any."""
    return next(reversed(_held), None)


def held_fds(folder: Path) -> tuple:
    """The descriptor of ``folder``'s lock (if this process owns it), for children that keep it owned while they run."""
    fd = _held.get(Path(folder).resolve())
    return () if fd is None else (fd,)


def release_all() -> None:
    """Give up every folder this process owns: it ended normally, so nothing of it is left to clean."""
    for folder, fd in list(_held.items()):
        try:
            os.unlink(folder / LOCK)
        except OSError:
            pass
        locks.release(fd)
        del _held[folder]


@dataclass
class Cleaned:
    """What one dead run had left and was removed."""

    folder: Path
    processes: List[int] = field(default_factory=list)
    sandboxes: List[Path] = field(default_factory=list)
    bytes: int = 0

    def line(self) -> str:
        parts = []
        if self.processes:
            parts.append(f"stopped {len(self.processes)} job process(es) still running")
        if self.sandboxes:
            parts.append(f"removed {len(self.sandboxes)} sandbox(es), {self.bytes / 1e6:.1f} MB")
        return (f"chaosckpt: {self.folder} was left by a chaosckpt that was killed: "
                + ("; ".join(parts) or "nothing to remove"))


def _sandboxes(folder: Path, depth: int = 3) -> List[Path]:
    found = []
    try:
        entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    for entry in entries:
        if entry.name == "sandboxes" or entry.name.startswith(".sandbox-"):
            found.append(Path(entry.path))
        elif depth > 1:
            found += _sandboxes(Path(entry.path), depth - 1)
    return found


def _under(proc: psutil.Process, prefixes: List[str]) -> bool:
    """Whether ``proc``'s run directory lies under one of ``prefixes``."""
    try:
        run_dir = proc.environ().get(protocol.ENV_RUN_DIR, "")
    except (psutil.Error, OSError):
        return False
    return any(run_dir.startswith(prefix) for prefix in prefixes)


def _job_processes(folder: Path) -> List[psutil.Process]:
    prefix = str(folder) + os.sep
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(protocol.ENV_RUN_DIR, "").startswith(prefix):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _elsewhere(folder: Path) -> List[Path]:
    """The trial folders under ``folder`` whose Slurm job is still queued or running: theirs are the cluster's
    processes and sandboxes, not a dead chaosckpt's (a suite killed while its trials ran as Slurm jobs)."""
    return [marker.parent for marker in folder.glob(f"*/*/{slurm.SUBMITTED}") if slurm.active_job(marker.parent)]


def _clean(folder: Path) -> Cleaned:
    done = Cleaned(folder)
    spared = [str(p) + os.sep for p in _elsewhere(folder)]
    procs = [p for p in _job_processes(folder) if not _under(p, spared)]
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            continue
        done.processes.append(proc.pid)
    psutil.wait_procs(procs, timeout=5)
    for box in _sandboxes(folder):
        if any(str(box).startswith(prefix) for prefix in spared):
            continue
        done.bytes += diskspace.tree_bytes(box)
        discard(box)
        done.sandboxes.append(box)
    return done


def discard(*paths: Path) -> None:
    """Rename each of ``paths`` (a sandbox, then its layers) to :data:`TRASH` + its name, then remove them:
    restartable, since a removal cut short leaves only trash, or layers without their sandbox, that :func:`sweep`
    finishes. A folder the rename cannot move (a mount on it) is removed where it is."""
    doomed = []
    for path in paths:
        trash = path.parent / f"{TRASH}{path.name}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            continue
        except OSError:
            trash = path
        doomed.append(trash)
    for trash in doomed:
        _remove(trash)


def _remove(path: Path) -> None:
    """``rmtree`` that opens what it cannot enter (overlayfs leaves its work folders mode 000)."""
    def unlocked(func, name, _exc):
        try:
            os.chmod(name, 0o700)
            shutil.rmtree(name, ignore_errors=True)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlocked)


def _trash(folder: Path, depth: int = 3) -> List[Path]:
    """Sandboxes under ``folder`` whose removal began and was cut short, and overlay layers (``NAME.layers``)
    whose sandbox is gone."""
    try:
        entries = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    names = {e.name for e in entries}
    found = [Path(e.path) for e in entries if e.name.startswith(TRASH)
             or e.name.endswith(".layers") and e.name[:-len(".layers")] not in names]
    for entry in entries:
        if depth > 1 and not entry.name.startswith(TRASH):
            found += _trash(Path(entry.path), depth - 1)
    return found


def report(out: Path) -> List[Cleaned]:
    """``sweep``, with one line on stderr per cleaned folder."""
    cleaned = sweep(out)
    for item in cleaned:
        print(item.line(), file=sys.stderr)
    return cleaned


def sweep(out: Path) -> List[Cleaned]:
    """Clean every folder under ``out`` whose run died, and finish every removal of a sandbox that was cut short
    (found by its name, whether its run's lock is there or not); folders of live runs are left alone."""
    cleaned = []
    for trash in _trash(Path(out)):
        done = Cleaned(trash.parent, bytes=diskspace.tree_bytes(trash), sandboxes=[trash])
        _remove(trash)
        cleaned.append(done)
    try:
        candidates = sorted(p.parent for p in Path(out).glob(f"*/{LOCK}"))
    except OSError:
        return cleaned
    for folder in candidates:
        folder = folder.resolve()
        if folder in _held:
            continue
        try:
            fd = locks.acquire(folder / LOCK)
        except (locks.Busy, OSError):
            continue
        try:
            cleaned.append(_clean(folder))
            os.unlink(folder / LOCK)
        except OSError:
            pass
        finally:
            locks.release(fd)
    return cleaned
