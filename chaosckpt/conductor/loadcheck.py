"""Can a restarted job load these files? Asked of one long-lived subprocess, so torch is imported once.

The worker reads one JSON list of paths a line on stdin and answers one JSON object
a line: path -> {"ok", "error", "progress"}. It loads with ``weights_only=True``, so
nothing in a checkpoint is executed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Dict, List, Optional

PROGRESS_KEYS = ("step", "global_step", "epoch", "iteration")


def _check(path: str) -> Dict:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any failure to load is what we report: the file is unreadable
        message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return {"ok": False, "error": f"{type(exc).__name__}: {message}".rstrip(": ")}
    progress = {}
    if isinstance(obj, dict):
        for key in PROGRESS_KEYS:
            value = obj.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                progress[key] = value
    return {"ok": True, "error": None, "progress": progress}


def worker() -> None:
    for line in sys.stdin:
        paths = json.loads(line)
        sys.stdout.write(json.dumps({p: _check(p) for p in paths}) + "\n")
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
                [sys.executable, "-c", "from chaosckpt.conductor.loadcheck import worker; worker()"],
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
