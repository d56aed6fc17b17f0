"""Reporting each write the sandbox refused, from the error the system gave the job.

Every call that creates, changes or removes a file (Python's ``open`` for writing and the
``os`` functions that change files) and fails with EROFS, read-only file system, is a
``refused`` event naming its paths, whether or not the job then catches the error: the
conductor stops the trial on a refusal outside the sandbox from these events, not from the
job's output. The mount namespace's read-only mounts raise it, or, without one, the guard.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Callable, Iterable

from chaosckpt.agent import patches

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Refusals:
    """The layer's state: where refused writes are reported."""

    def __init__(self, emit: Callable[..., None]) -> None:
        self.emit = emit

    def report(self, op: str, exc: OSError, paths: Iterable[Any]) -> None:
        if exc.errno != errno.EROFS:
            return
        try:
            named = [os.path.abspath(os.fsdecode(p)) for p in paths if isinstance(p, (str, bytes, os.PathLike))]
            if named:
                self.emit("refused", op=op, paths=named)
        except Exception:
            pass  # reporting must never change what the job sees


def install(emit: Callable[..., None]) -> None:
    """Report refused writes through ``emit`` (the ``refusals`` layer of ``patches``)."""
    patches.install("refusals", Refusals(emit))


def reported_open(state: Refusals, original: Callable) -> Callable:
    def reported(file, mode="r", *args, **kwargs):
        try:
            return original(file, mode, *args, **kwargs)
        except OSError as exc:
            if any(c in mode for c in "wax+"):
                state.report("open", exc, [file])
            raise

    return reported


def reported_os_open(state: Refusals, original: Callable) -> Callable:
    def os_open(path, flags, *args, **kwargs):
        try:
            return original(path, flags, *args, **kwargs)
        except OSError as exc:
            if flags & _WRITE_FLAGS and kwargs.get("dir_fd") is None:
                state.report("open", exc, [path])
            raise

    return os_open


def reported(state: Refusals, original: Callable, op: str, *paths: int) -> Callable:
    """An ``os`` function whose arguments at positions ``paths`` are paths it changes."""
    def call(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except OSError as exc:
            if kwargs.get("dir_fd") is None and kwargs.get("src_dir_fd") is None and kwargs.get("dst_dir_fd") is None:
                state.report(op, exc, [args[i] for i in paths if i < len(args)])
            raise

    return call
