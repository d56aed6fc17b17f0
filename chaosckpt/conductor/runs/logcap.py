"""A job's output kept with bounded disk and memory: its head and its tail, with the bytes dropped between.

The job writes into a pipe; a thread per stream copies the first ``HEAD`` bytes
into the log file as they come and keeps only the last ``TAIL`` bytes in memory,
written after a line saying how many bytes were dropped when the stream ends.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from pathlib import Path
from typing import Deque, Optional

HEAD = 4 << 20
TAIL = 4 << 20
CHUNK = 1 << 16
TAIL_READ = 64 << 10
"""How much of a log's end ``last_line`` reads."""
_RULE = re.compile(r"^[\s=\-_*#~+]+$")
_EXCEPTION = re.compile(r"^(?:\[[\w ]+\]:\s*)?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?::|$)")
"""A traceback's last line, ``KeyError: 'x'``, also as torchrun prefixes a rank's output (``[rank1]: ...``)."""
_LAUNCHER_ERROR = "ChildFailedError"


class CappedLog:
    """Drains the read end of a pipe into ``path``, keeping the head and the tail."""

    def __init__(self, read_fd: int, path: Path, head: int = HEAD, tail: int = TAIL) -> None:
        self.fd = read_fd
        self.path = path
        self.head = head
        self.tail = tail
        self.dropped = 0
        self.error: Optional[OSError] = None
        """The first error writing the log (a full disk); the pipe is drained all the same."""
        self.thread = threading.Thread(target=self._drain, name=f"log {path.name}", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        kept: Deque[bytes] = collections.deque()
        kept_bytes = written = 0
        with open(self.path, "wb", buffering=0) as out:
            while True:
                chunk = os.read(self.fd, CHUNK)
                if not chunk:
                    break
                if written < self.head:
                    take = chunk[: self.head - written]
                    self._write(out, take)
                    written += len(take)
                    chunk = chunk[len(take):]
                if chunk:
                    kept.append(chunk)
                    kept_bytes += len(chunk)
                    while kept_bytes - len(kept[0]) >= self.tail:
                        self.dropped += len(kept[0])
                        kept_bytes -= len(kept.popleft())
            os.close(self.fd)
            if kept_bytes > self.tail:
                cut = kept_bytes - self.tail
                kept[0] = kept[0][cut:]
                self.dropped += cut
            if self.dropped:
                self._write(out, f"\n[chaosckpt: {self.dropped} bytes of output dropped here; the first {self.head} "
                                 f"and the last {self.tail} bytes are kept]\n".encode())
            for chunk in kept:
                self._write(out, chunk)

    def _write(self, out, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            out.write(data)
        except OSError as exc:
            self.error = exc

    def close(self, timeout: float = 10.0) -> None:
        """Wait for the stream to end (every writer of the pipe gone) and the log to be written."""
        self.thread.join(timeout)


def pipe_into(path: Path) -> "tuple[int, CappedLog]":
    """A pipe whose write end is for the job and whose read end fills ``path``."""
    read_fd, write_fd = os.pipe()
    return write_fd, CappedLog(read_fd, path)


def tail(path: Path, nbytes: int = TAIL_READ) -> str:
    """The last ``nbytes`` of a log as text, read from its end only ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - nbytes))
            data = f.read()
    except OSError:
        return ""
    return data.decode(errors="replace")


def last_line(path: Path, limit: int = 300) -> str:
    """The line of a log's end that says what went wrong: the last exception a process printed (a rank's own,
    not torchrun's ``ChildFailedError`` summary after it), else the last line that is not blank or a rule."""
    lines = [line.strip() for line in tail(path).splitlines() if line.strip() and not _RULE.match(line)]
    raised = [line for line in lines if _EXCEPTION.match(line) and _LAUNCHER_ERROR not in line]
    return (raised or lines or [""])[-1][:limit]
