"""Refusing writes outside the sandbox where no mount namespace can hold the job in it.

The fallback of ``chaosckpt.conductor.runs.confinement``: Python's ``open`` and the
``os`` functions that create, change or remove files raise EROFS, as a read-only
mount would, for any path outside the allowed folders. The conductor reads the
error from the job's output and stops with the paths. Native writers that bypass
Python (C++ file writers) are not seen here; the namespace covers them.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from typing import Callable, List, Optional

from chaosckpt.agent import patches

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
    """Refuse writes outside ``roots`` (the ``guard`` layer of ``patches``)."""
    patches.install("guard", checker(roots))


def checker(roots: List[str]) -> Callable[..., None]:
    """What the guard's wrappers call on a path: raises EROFS, as a read-only mount would, outside ``roots``."""
    roots = [os.path.realpath(r) for r in roots if r]

    def check(path, dir_fd=None) -> None:
        if isinstance(path, int) or dir_fd is not None:
            return
        full = os.path.realpath(os.fsdecode(path))
        if not any(full == r or full.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    return check


def refusing_open(check: Callable[..., None], original: Callable) -> Callable:
    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            check(file)
        return original(file, mode, *args, **kwargs)

    return guarded_open


def refusing_os_open(check: Callable[..., None], original: Callable) -> Callable:
    def os_open(path, flags, *args, **kwargs):
        if flags & _WRITE_FLAGS:
            check(path, kwargs.get("dir_fd"))
        return original(path, flags, *args, **kwargs)

    return os_open


def refusing(check: Callable[..., None], original: Callable, *checked: int) -> Callable:
    """An ``os`` function whose arguments at positions ``checked`` are paths it changes."""
    def call(*args, **kwargs):
        for i in checked:
            if i < len(args):
                check(args[i], kwargs.get("dir_fd"))
        return original(*args, **kwargs)

    return call
