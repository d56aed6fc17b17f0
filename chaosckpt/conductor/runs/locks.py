"""Advisory locks (``fcntl.flock``) that say which chaosckpt process owns a folder or a cache entry.

A lock lives as long as its open file: the kernel drops it when the holder dies,
however it dies, so a lock that can be taken means its last holder is gone. The
holder writes its pid into the file, for the message that names it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Optional


class Busy(Exception):
    """Another live process holds the lock."""

    def __init__(self, path: Path, pid: Optional[int]) -> None:
        super().__init__(f"{path} is held by pid {pid}")
        self.path = path
        self.pid = pid


def holder(path: Path) -> Optional[int]:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def acquire(path: Path, wait: bool = False) -> int:
    """Lock ``path`` (created if missing) and return its descriptor; raise ``Busy`` unless ``wait``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        raise Busy(Path(path), holder(path)) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int) -> None:
    os.close(fd)
