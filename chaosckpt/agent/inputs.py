"""The files a job reads from its working directory, reported at exit, so that a cached reference run is
reused exactly while they stay the same (a log the user writes beside the job changes nothing).

Active only when the conductor asks (``CHAOSCKPT_INPUTS``, on reference runs): an audit hook notes every
path opened for reading, the import system's source files included.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Set

from chaosckpt import protocol

LIMIT = 20000
"""At most this many paths are kept; past it the job is reported as reading everything."""
_WRITE_FLAGS = os.O_WRONLY
_seen: Set[str] = set()
_overflow = False


def _hook(event: str, args: tuple) -> None:
    global _overflow
    if event != "open" or _overflow or not args or not isinstance(args[0], (str, bytes)):
        return
    mode, flags = (args[1], args[2]) if len(args) > 2 else (None, 0)
    if isinstance(mode, str) and ("r" not in mode and "+" not in mode):
        return
    if mode is None and isinstance(flags, int) and flags & os.O_ACCMODE == _WRITE_FLAGS:
        return
    try:
        _seen.add(os.path.abspath(os.fsdecode(args[0])))
    except (TypeError, ValueError):
        return
    if len(_seen) > LIMIT:
        _overflow = True


def _report(run_dir: str) -> None:
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path):
            _seen.add(os.path.abspath(path))
    root = os.getcwd()
    files = sorted(os.path.relpath(p, root) for p in _seen
                   if p.startswith(root + os.sep) and not p.startswith(run_dir + os.sep))
    try:
        with open(os.path.join(run_dir, f"{protocol.INPUTS_PREFIX}{os.getpid()}.json"), "w") as out:
            json.dump({"cwd": root, "files": None if _overflow else files}, out)
    except OSError:
        pass  # the conductor then treats every file of the working directory as read


def start() -> None:
    if os.environ.get(protocol.ENV_INPUTS) != "1":
        return
    sys.addaudithook(_hook)
    atexit.register(_report, os.path.abspath(os.environ[protocol.ENV_RUN_DIR]))
