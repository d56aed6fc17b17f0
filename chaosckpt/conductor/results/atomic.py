"""Durable writes for chaosckpt's own result files: temp file, flush, fsync, rename, fsync of the directory."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from chaosckpt.conductor.errors import printable


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new one, never a mix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # as open() would create it; mkstemp makes it private
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def set_aside(path: Path, why: str, then: str = "") -> None:
    """Move a damaged state file out of the way (``NAME.damaged-<timestamp>``), saying so in one line on stderr,
    so that the command goes on with what is intact and the next one does not trip on it again; ``then``: what
    the command does instead (``and started a new history``)."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(path, aside)
        moved = f"moved it to {aside.name}{' ' + then if then else ''}"
    except OSError as exc:
        moved = f"could not move it aside ({exc.strerror or exc}), so it is left out"
    print(printable(f"chaosckpt: warning: {path} was damaged ({why}); {moved}"), file=sys.stderr)
