"""Can a restarted job load these files? Asked of one long-lived subprocess, so torch is imported once.

The worker reads one JSON list of paths a line on stdin and answers one JSON object
a line: path -> {"ok", "error", "note", "progress"}. The judge is audit's safe reader
(allowlisted unpickling, zip structure, CRCs), so nothing in a checkpoint is executed
and a file is unreadable only when it is torn or damaged. A file whose pickle names
objects outside the allowlist (numpy or Python RNG states, custom classes) loads with
``weights_only=False``: it is readable, with a lesser note saying so. Each file is read in a child under
audit's limits (``box``), so a file the job built to exhaust the reader is unreadable, not a hung sweep.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

PROGRESS_KEYS = ("step", "global_step", "epoch", "iteration")


def check(path: str) -> Dict:
    """Whether ``path`` loads: ``{"ok", "error", "note", "progress"}`` (error/note empty strings when none), read
    under the limits ``audit`` reads a file of its size with."""
    from chaosckpt.conductor.disk import audit, box  # noqa: F401 - torch imported here once, not in each child

    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0  # _check says why it cannot read the file
    try:
        return box.run(functools.partial(_check, path), box.Limits.for_size(size))
    except box.LimitReached as reached:
        return {"ok": False, "error": f"reading it was stopped at its {reached.which} limit ({reached.figure}): a "
                "pickle built to exhaust the reader, or more than a checkpoint of its size should take",
                "note": "", "progress": {}}


def _check(path: str) -> Dict:
    """:func:`check`, in the reading child."""
    from chaosckpt.conductor.disk import audit

    try:
        loaded = audit.load(path)
    except audit.AuditError as exc:
        return {"ok": False, "error": str(exc), "note": "", "progress": {}}
    note = ""
    beyond = loaded.log.beyond_weights_only()
    if beyond:
        note = (f"needs torch.load(weights_only=False): its pickle names {', '.join(beyond[:3])}"
                + (" and more" if len(beyond) > 3 else ""))
    progress = {}
    if isinstance(loaded.obj, dict):
        for key in PROGRESS_KEYS:
            value = loaded.obj.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                progress[key] = value
    return {"ok": True, "error": "", "note": note, "progress": progress}


def worker() -> None:
    for line in sys.stdin:
        paths = json.loads(line)
        sys.stdout.write(json.dumps({p: check(p) for p in paths}) + "\n")
        sys.stdout.flush()


class LoadChecker:
    """The conductor's handle on the worker process."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None

    def check(self, paths: List[str]) -> Dict[str, Dict]:
        if not paths:
            return {}
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from chaosckpt.conductor.disk.loadcheck import worker; worker()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )
        self._proc.stdin.write(json.dumps(paths) + "\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    def close(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None
