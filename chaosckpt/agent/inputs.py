"""The files a job reads from its working directory, and the environment variables its own code reads, reported
at exit, so that a cached reference run is reused exactly while they stay the same (a log the user writes beside
the job changes nothing).

Active only when the conductor asks (``CHAOSCKPT_INPUTS``, on reference runs): an audit hook notes every
path opened for reading, the import system's source files included, and ``os.environ`` notes each name read from
a file under the working directory (a library's own settings are keyed by the conductor's prefixes instead);
the job's code walking the whole environment is reported as reading all of it.
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
_env: Set[str] = set()
_env_all = False
_root = ""
_run_dir = ""
_PLUMBING = ("<frozen os>", "<frozen _collections_abc>", os.__file__, __file__)
"""Where an environment read passes on its way from the code that asked (``os.getenv``, ``Mapping.get``)."""


def _by_job() -> bool:
    """Whether the environment is being read by a file under the working directory, the job's own code."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith("<"):  # a frozen module of the standard library
        return False
    return os.path.abspath(frame.f_code.co_filename).startswith(_root + os.sep)


class _Environ(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` noting what the job's own code reads of it."""

    def __getitem__(self, key):
        if key not in _env and _by_job():
            _env.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        if key not in _env and _by_job():
            _env.add(key)
        return super().__contains__(key)

    def __iter__(self):
        global _env_all
        if not _env_all and _by_job():
            _env_all = True
        return super().__iter__()


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


def report() -> None:
    """Write what this process has read so far (again at exit): a process held until it is killed, at its
    horizon, never reaches its exit handlers. Nothing when the conductor did not ask."""
    if _run_dir:
        _report(_run_dir)


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
            json.dump({"cwd": root, "files": None if _overflow else files,
                       "env": None if _env_all else sorted(k for k in _env if isinstance(k, str))}, out)
    except OSError:
        pass  # the conductor then treats every file of the working directory as read


def start() -> None:
    if os.environ.get(protocol.ENV_INPUTS) != "1":
        return
    global _root, _run_dir
    _root = os.getcwd()
    _run_dir = os.path.abspath(os.environ[protocol.ENV_RUN_DIR])
    sys.addaudithook(_hook)
    atexit.register(report)
    os.environ.__class__ = _Environ
