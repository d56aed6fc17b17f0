"""A progress line on a terminal while a run of a trial goes: which run, its step (of its horizon), the
time it has taken. One line on stderr rewritten with a carriage return, twice a second at most; the
caller leaves it out under ``--json`` and when stderr is not a terminal (CI, suite workers)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional, TextIO

from chaosckpt import protocol

INTERVAL_S = 0.5
TAIL_BYTES = 16384


def last_step(events_dir: Path) -> int:
    """The highest step any process of the run has recorded so far (read from the ends of its event files)."""
    best = 0
    for path in protocol.event_files(events_dir):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - TAIL_BYTES))
                lines = f.read().split(b"\n")
        except OSError:
            continue
        for line in reversed(lines):
            if b'"t":"step"' in line:
                try:
                    best = max(best, int(json.loads(line)["step"]))
                except (ValueError, KeyError, TypeError):
                    continue
                break
    return best


def describe(stop: Optional[dict]) -> str:
    """How far a run goes, in words."""
    if stop is None:
        return ""
    after = stop.get("after")
    if not after:
        return f" of {stop['steps']}"
    points = ", ".join(f"save {c['save']}" if "save" in c else f"step {c['step']}" if "step" in c
                       else f"{c['seconds']:g} s" for c in after)
    return f" (stops {stop['steps']} steps after {points})"


def label(step: int, stop: Optional[dict], fault: Optional[dict] = None) -> str:
    """Where a run is: ``starting`` until its first step (the job is still importing), then its step and how far
    it goes; a run the fault halts goes as far as the fault."""
    if not step:
        return "starting"
    if fault is not None and fault.get("kind") == "halt":
        return f"step {step} (stops at the fault in save {fault['save']})"
    return f"step {step}{describe(stop)}"


class RunProgress:
    """Rewrites one line on ``stream`` as a run goes; ``done`` clears it."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self._next = 0.0
        self._width = 0

    def __call__(self, name: str, events_dir: Path, elapsed_s: float, stop: Optional[dict],
                 fault: Optional[dict] = None) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + INTERVAL_S
        self._show(f"chaosckpt: {name} run, {label(last_step(events_dir), stop, fault)}, {elapsed_s:.0f} s")

    def _show(self, line: str) -> None:
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def done(self) -> None:
        if self._width:
            self._show("")
            self.stream.write("\r")
            self.stream.flush()
            self._width = 0
            self._next = 0.0


def wanted(quiet: bool, stream: Optional[TextIO] = None) -> Optional[RunProgress]:
    """A progress line when it can be seen: not ``quiet`` and ``stream`` (stderr as it is now) a terminal."""
    stream = stream or sys.stderr
    return None if quiet or not stream.isatty() else RunProgress(stream)
