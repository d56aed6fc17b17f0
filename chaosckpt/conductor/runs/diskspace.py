"""chaosckpt's own disk: free space checked before the faulted runs, and a full disk told from a verdict.

A run that fails because the disk holding the results (and the sandboxes) filled
up says nothing about the job's resilience, so it is inconclusive, named with
the disk and the bytes free and needed, never PASSED or FAILED.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Iterable, Optional

from chaosckpt.conductor.runs import logcap
from chaosckpt.conductor.runs.runlog import RunLog

ENOSPC_TEXT = ("[Errno 28]", os.strerror(errno.ENOSPC))
LOW_WATER = 1 << 20
"""Below this many free bytes, an ENOSPC the job met is the real disk's even when the fault was a full disk."""


def mount_point(path: Path) -> Path:
    path = Path(path).resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: Path) -> int:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def describe(path: Path, need: Optional[int] = None, what: str = "") -> str:
    """``the disk holding X (mounted at M) is full: F bytes free, about N needed; ...``"""
    needed = f", about {need} needed" if need else ""
    return (f"the disk holding {path} (mounted at {mount_point(path)}) is full: {free_bytes(path)} bytes free{needed}"
            f"{'; ' + what if what else ''}; free some space or give --out on a larger disk")


def tree_bytes(root: Path, exclude: Iterable[Path] = ()) -> int:
    """Bytes of the files under ``root`` (what a sandbox copy of it takes), leaving out ``exclude``."""
    skip = {Path(p).resolve() for p in exclude}
    total = 0
    for folder, dirs, files in os.walk(root):
        here = Path(folder).resolve()
        dirs[:] = [d for d in dirs if here / d not in skip and d not in (".git", ".chaosckpt", "__pycache__")]
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def hit_full_disk(stderr: Path, events: Path, armed_enospc: bool, log_error: Optional[OSError] = None) -> bool:
    """Whether a run failed on a full disk that was not the fault chaosckpt armed: its own log could not be
    written, or the job met ENOSPC (in its last error line or a failed save or load) with no ENOSPC fault armed,
    or with the disk really (nearly) full."""
    if log_error is not None and log_error.errno == errno.ENOSPC:
        return True
    log = RunLog.read(events) if events.is_dir() else RunLog([])
    errors = [logcap.last_line(stderr)]
    errors += [s.error or "" for p in log.processes for s in p.saves]
    errors += [e.get("error") or "" for e in log.failed_loads()]
    met = any(text in error for error in errors for text in ENOSPC_TEXT)
    return met and (not armed_enospc or free_bytes(events) < LOW_WATER)
