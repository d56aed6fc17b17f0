"""SIGTERM and SIGHUP (a CI cancel, Kubernetes, Slurm, a closed terminal) handled like Ctrl-C.

Each raises ``Terminated``, a ``KeyboardInterrupt``, so the code that cleans up
after Ctrl-C (job trees killed, sandboxes removed, the ``--resume`` line) runs
for them too; the command then exits 128 + the signal's number, as shells expect.
"""

from __future__ import annotations

import signal
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """The process was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: Any) -> None:
    for sig in (*HANDLED, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the cleanup short
    raise Terminated(signum)


def install() -> None:
    for sig in HANDLED:
        signal.signal(sig, _raise)


def exit_status(exc: KeyboardInterrupt) -> int:
    """128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def describe(exc: KeyboardInterrupt) -> str:
    signum = getattr(exc, "signum", None)
    return "Interrupted" if signum is None else f"Terminated by {signal.Signals(signum).name}"
