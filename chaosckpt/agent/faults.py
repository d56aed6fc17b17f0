"""Faults the agent fires inside the job, armed by the conductor through ``CHAOSCKPT_FAULT``.

A fault is a ``protocol.FaultSpec``: a ``kind``, the ``save`` (1-based, counted in the
process: a checkpoint, every save call between two steps) it concerns, one placement,
and optionally ``rank``, ``track`` and the one file of the checkpoint whose bytes
``at_byte`` / ``at_write`` count: ``file`` (its name) or ``file_index`` (its place among
the checkpoint's files, in the order their first bytes come); else they count across
the checkpoint:

- ``halt``: hold the job still and raise a flag; the conductor SIGKILLs the whole
  tree. Placed at ``at_byte`` or before write ``at_write`` of the save, after
  journal operation ``at_op`` counted from the save's start, or ``after_save``:
  at the job's next step or save after the save returned (the job believes it
  saved), or at its exit.
- ``preempt``: before the write at ``at_byte`` / ``at_write`` of the save, raise the flag and wait (at most
  ``SIGNAL_WAIT``) while the conductor signals the job as a scheduler preempting it would; the job's handler runs
  there (or the signal ends the process), then the write goes on. The conductor SIGKILLs what is left after the
  grace period.
- ``enospc``: the write at ``at_byte`` / ``at_write`` of the save writes what fits
  and raises ``OSError(ENOSPC)``, as a full disk does; the job carries on as it may.
- ``disk-full``: from the start of the save, ``free_bytes`` more bytes fit in the
  tracked directories; every write after that fails with ENOSPC until the job exits.

- ``eval``: ``after_load``, right after the job restores a module's state, every
  module of it is put in eval mode, as a validation pass before training would.

``track`` (a list of directories) turns the durability journal on (see ``fileops``).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import List, Optional

from chaosckpt import protocol
from chaosckpt.agent import inputs, watchdog

HALT_SECONDS = 600.0
"""How long a halted job waits for the conductor's SIGKILL before exiting by itself (sooner if the conductor dies)."""
HALT_EXIT_CODE = 86
SIGNAL_WAIT = 30.0
"""The longest a preempted process waits for the conductor's signal before going on without it."""
IN_FLIGHT_WAIT = 30.0
"""The longest a background save's writer waits at its fault for the training thread to be held (a job waiting for
its save takes no step), and the longest the training thread is held waiting for the fault."""
FaultSpecError = protocol.FaultSpecError


@dataclass(frozen=True)
class ArmedFault:
    """Which fault fires where."""

    kind: str
    save: int
    at_byte: Optional[int] = None
    at_write: Optional[int] = None
    at_op: Optional[int] = None
    after_save: bool = False
    free_bytes: Optional[int] = None
    after_load: bool = False
    rank: Optional[int] = None
    track: Optional[List[str]] = None
    write_ends: bool = False
    """Report where each write of the save ended (``save-end``'s ``ends``): a suite rebuilds kills at any byte
    or write of it from one shared run."""
    file: Optional[str] = None
    file_index: Optional[int] = None
    """The fault counts in the checkpoint's file whose first bytes came ``file_index``-th: the conductor places a
    fraction of a save in the file that holds it, so the same file is cut when another run's files differ in size
    (a job that writes its own folder's path into its checkpoints)."""
    steps_in_flight: Optional[int] = None
    """A save on a background thread: the fault at its place waits until the training thread has taken this many
    steps since the save began, so that it strikes while both the training and the write run."""
    handed_step: Optional[int] = None
    """The save is written on a background thread, handed the state of this step (the reference run says so): the
    training thread waits at its optimizer step ``steps_in_flight`` (default 0) steps later, and the writer at its
    place waits for it there, so where each stands when the fault strikes is fixed, not left to thread timing."""

    @classmethod
    def from_json(cls, text: str) -> "ArmedFault":
        """The fault ``CHAOSCKPT_FAULT`` holds; ``FaultSpecError`` when it is malformed."""
        spec = protocol.decode_fault(text)
        return cls(**{k: v for k, v in spec.items() if k != "v"})

    def applies_to(self, rank: Optional[int]) -> bool:
        return self.rank is None or self.rank == (rank or 0)

    def per_file(self) -> bool:
        """Whether its place is counted in one file of the checkpoint, not across all of them."""
        return self.file is not None or self.file_index is not None

    def cut(self, writes_done: int, bytes_done: int, size: int) -> Optional[int]:
        """Bytes of the next write of the save to let through before firing, or None if it does not fire there."""
        if self.at_write is not None:
            return 0 if writes_done + 1 == self.at_write else None
        if self.at_byte is not None and bytes_done <= self.at_byte < bytes_done + size:
            return self.at_byte - bytes_done
        return None


def disk_full_error() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def halt(writer, event: str = "fault", flag: str = protocol.FAULT_FLAG_PREFIX, **fields: object) -> None:
    """Record the fault (or the horizon's ``stop``), raise its flag and hold the process still until it is killed."""
    inputs.report()
    writer.emit(event, **fields)
    writer.raise_flag(flag)
    deadline = time.monotonic() + HALT_SECONDS
    while time.monotonic() < deadline and watchdog.conductor_alive():
        time.sleep(0.05)
    os._exit(HALT_EXIT_CODE)


def preempt(writer, **fields: object) -> None:
    """Record the fault, raise its flag and wait until the conductor has sent the preemption's signal: the job's
    handler runs during this wait (the sleep is interrupted for it), or the signal's default action ends the
    process here."""
    writer.emit("fault", **fields)
    writer.raise_flag(protocol.FAULT_FLAG_PREFIX)
    mark = os.path.join(writer.run_dir, protocol.SIGNALLED_MARK)
    deadline = time.monotonic() + SIGNAL_WAIT
    while not os.path.exists(mark) and time.monotonic() < deadline and watchdog.conductor_alive():
        time.sleep(0.005)
