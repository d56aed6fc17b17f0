"""Faults the agent can fire inside the job, armed by the conductor through ``CHAOSCKPT_FAULT``.

A fault is a JSON object: ``{"kind": "halt", "save": 2, "at_byte": 1234}`` or with
``"at_write": 7`` instead of ``at_byte``; ``"rank"`` limits it to one rank.
``halt`` stops the job at that point of the save, after the bytes before it
reached the file, and raises a flag: the conductor then SIGKILLs the whole tree.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

from chaosckpt import protocol

HALT_SECONDS = 600.0
"""How long a halted job waits for the conductor's SIGKILL before exiting by itself."""
HALT_EXIT_CODE = 86
KINDS = ("halt",)


class FaultSpecError(ValueError):
    """The armed fault description is malformed (a conductor bug, never user input)."""


@dataclass(frozen=True)
class ArmedFault:
    """Where in which save the fault fires."""

    kind: str
    save: int
    at_byte: Optional[int] = None
    at_write: Optional[int] = None
    rank: Optional[int] = None

    @classmethod
    def from_json(cls, spec: dict) -> "ArmedFault":
        try:
            fault = cls(**spec)
        except TypeError as exc:
            raise FaultSpecError(str(exc)) from None
        if fault.kind not in KINDS or fault.save < 1 or (fault.at_byte is None) == (fault.at_write is None):
            raise FaultSpecError(f"bad fault {spec!r}")
        return fault

    def applies_to(self, rank: Optional[int]) -> bool:
        return self.rank is None or self.rank == (rank or 0)

    def cut(self, writes_done: int, bytes_done: int, size: int) -> Optional[int]:
        """Bytes of the next write to let through before firing, or None if it does not fire there."""
        if self.at_write is not None:
            return 0 if writes_done + 1 == self.at_write else None
        if bytes_done <= self.at_byte < bytes_done + size:
            return self.at_byte - bytes_done
        return None


def halt(writer, **fields: object) -> None:
    """Record the fault, raise the flag and hold the process still until it is killed."""
    writer.emit("fault", **fields)
    writer.raise_flag(protocol.FAULT_FLAG_PREFIX)
    deadline = time.monotonic() + HALT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(HALT_EXIT_CODE)
