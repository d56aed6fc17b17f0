"""The agent's end of the event protocol: one append-only JSON Lines file per process."""

from __future__ import annotations

import os
import time

from chaosckpt import protocol

# Private references, so a job (or our own interposition) that patches ``os`` cannot break recording.
_open, _write, _close, _getpid = os.open, os.write, os.close, os.getpid
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class EventWriter:
    """Writes events of this process, each as a single ``write`` of one whole line."""

    def __init__(self, run_dir: str, rank: int | None) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self._fd: int | None = None
        self._pid = 0

    def emit(self, kind: str, **fields: object) -> None:
        """Append one event; opened lazily so processes that never record leave no file."""
        pid = _getpid()
        if self._fd is None or pid != self._pid:
            name = protocol.events_file_name(self.rank, pid)
            self._fd = _open(os.path.join(self.run_dir, name), _FLAGS, 0o644)
            self._pid = pid
        event = {"v": protocol.SCHEMA_VERSION, "t": kind, "ts": time.time(), "pid": pid}
        event.update(fields)
        try:
            _write(self._fd, protocol.encode(event))
        except (OSError, TypeError, ValueError):
            pass  # a full disk or a value JSON cannot hold must not break the job; the conductor sees the gap

    def raise_flag(self, prefix: str) -> None:
        """Create an empty marker file ``<prefix><pid>`` the conductor polls for."""
        fd = _open(os.path.join(self.run_dir, f"{prefix}{_getpid()}"), _FLAGS, 0o644)
        _close(fd)
