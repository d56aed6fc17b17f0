"""Refusing writes outside the sandbox where no mount namespace can hold the job in it.

The fallback of ``chaosckpt.conductor.runs.confinement``: Python's ``open`` and the
``os`` functions that create, change or remove files raise EROFS, as a read-only
mount would, for any path outside the allowed folders. The conductor reads the
error from the job's output and stops with the paths. Native writers that bypass
Python (C++ file writers) are not seen here; the namespace covers them.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import re
import sys
from typing import Callable, List, Optional

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
REFUSED = "chaosckpt: refused write outside the sandbox: "
"""Starts the line naming a refused write; ``chaosckpt.conductor.runs.confinement`` reads it."""
_NATIVE = re.compile(r"(?:File|Parent directory) (.+?) (?:cannot be opened|does not exist)")
"""torch's C++ writers name the file they could not create this way, without an errno."""


def _refused(exc: BaseException) -> Optional[str]:
    if isinstance(exc, OSError) and exc.errno == errno.EROFS and isinstance(exc.filename, (str, bytes)):
        return os.path.abspath(os.fsdecode(exc.filename))
    match = _NATIVE.search(str(exc)) if isinstance(exc, RuntimeError) else None
    if match:
        folder = os.path.dirname(os.path.abspath(match.group(1))) or "/"
        while not os.path.isdir(folder):
            folder = os.path.dirname(folder)
        if not os.access(folder, os.W_OK):
            return os.path.abspath(match.group(1))
    return None


def name_refusals() -> None:
    """When the job dies of a refused write, name the file as an absolute path: the job may have
    changed folder since, and its own message gives the path as it was written."""
    previous = sys.excepthook

    def hook(kind, exc, tb):
        previous(kind, exc, tb)
        try:
            path = _refused(exc)
            if path is not None:
                sys.stderr.write(f"{REFUSED}{path}\n")
        except Exception:
            pass

    sys.excepthook = hook


def install(roots: List[str]) -> None:
    roots = [os.path.realpath(r) for r in roots if r]

    def check(path, dir_fd=None) -> None:
        if isinstance(path, int) or dir_fd is not None:
            return
        full = os.path.realpath(os.fsdecode(path))
        if not any(full == r or full.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    original_open = builtins.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            check(file)
        return original_open(file, mode, *args, **kwargs)

    builtins.open = io.open = guarded_open

    def guarded(original: Callable, *checked: int) -> Callable:
        def call(*args, **kwargs):
            for i in checked:
                if i < len(args):
                    check(args[i], kwargs.get("dir_fd"))
            return original(*args, **kwargs)

        return call

    original_os_open = os.open

    def os_open(path, flags, *args, **kwargs):
        if flags & _WRITE_FLAGS:
            check(path, kwargs.get("dir_fd"))
        return original_os_open(path, flags, *args, **kwargs)

    os.open = os_open
    for name, checked in (("mkdir", (0,)), ("rename", (0, 1)), ("replace", (0, 1)), ("remove", (0,)),
                          ("unlink", (0,)), ("rmdir", (0,)), ("truncate", (0,)), ("symlink", (1,)), ("link", (1,))):
        setattr(os, name, guarded(getattr(os, name), *checked))
