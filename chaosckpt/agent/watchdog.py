"""Ends a job whose conductor is gone: nobody will score it or kill it, so it must not live on.

The conductor's pid comes in ``CHAOSCKPT_CONDUCTOR``; its start time, read when the
agent starts, tells a reused pid from the conductor. In a run's PID namespace, where
the conductor cannot be seen, it is ``1``: the namespace's first process, which dies
with the confinement helper, which dies with the conductor. A daemon thread checks once a
second; a job held still by a fault checks in its own wait loop too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Optional, Tuple

from chaosckpt import protocol

INTERVAL_S = 1.0
_conductor: Optional[Tuple[int, Optional[str]]] = None


def _start_time(pid: int) -> Optional[str]:
    """The process's start time from /proc (None where there is no /proc); raises OSError when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise
        os.kill(pid, 0)
        return None
    if fields[0] in (b"Z", b"X"):
        raise ProcessLookupError(pid)
    return fields[19].decode()


def conductor_alive() -> bool:
    """Whether the process that started this run still runs (True when none was named)."""
    if _conductor is None:
        return True
    pid, started = _conductor
    try:
        return _start_time(pid) == started
    except OSError:
        return False


def _stop_if_orphaned() -> None:
    if not conductor_alive():
        os.kill(os.getpid(), signal.SIGKILL)


def _watch() -> None:
    while True:
        time.sleep(INTERVAL_S)
        _stop_if_orphaned()


def start() -> None:
    """Remember the conductor and start watching it; a job started after its conductor died stops now."""
    global _conductor
    value = os.environ.get(protocol.ENV_CONDUCTOR, "")
    if not value.isdigit():
        return
    pid = int(value)
    try:
        _conductor = (pid, _start_time(pid))
    except OSError:
        _conductor = (pid, "gone")
    _stop_if_orphaned()
    threading.Thread(target=_watch, name="chaosckpt-watchdog", daemon=True).start()
