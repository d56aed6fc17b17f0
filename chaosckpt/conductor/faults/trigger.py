"""Where a fault fires: the trigger table of a scenario, and the checks of the keys every fault kind shares."""

from __future__ import annotations

from dataclasses import dataclass

from chaosckpt.conductor.errors import UsageError, shown

PLACEMENT_KEYS = ("save", "step", "after")
"""Which save a fault concerns: its number (negative: counted from the reference's end), the first save
at or after a step, or the first save at or after a wall-clock time into the run."""
OPTIONAL_KEYS = ("node", "file", "steps_in_flight")
"""Trigger keys left out of a scenario's parameters when not given (multi-node jobs; one file of a checkpoint; the steps
a background save's fault waits for)."""


def whole(value: object, least: int) -> bool:
    """Whether ``value`` is an integer (not a bool) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def duration_s(value: object) -> float | None:
    """Seconds from ``90``, ``90s``, ``45m`` or ``1.5h``; None when ``value`` is none of these."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if value >= 0 else None
    if not isinstance(value, str) or len(value) < 2 or value[-1] not in DURATION_UNITS:
        return None
    try:
        number = float(value[:-1])
    except ValueError:
        return None
    return number * DURATION_UNITS[value[-1]] if number >= 0 else None


@dataclass(frozen=True)
class Trigger:
    """Where the fault fires: save number ``save``, at ``fraction`` of its bytes or before write ``write``;
    for ENOSPC optionally after ``free_bytes`` more bytes; for a power loss after operation ``op`` of the
    save (else just after it returns), under durability ``model``."""

    save: int = 2
    step: int | None = None
    """Instead of ``save``: the first save at or after this step of the reference run."""
    after: int | float | str | None = None
    """Instead of ``save``: the first save at or after this time into the reference run (``90s``, ``45m``, ``2h``)."""
    fraction: float = 0.5
    write: int | None = None
    file: str | None = None
    """The name of one file of the checkpoint that ``fraction`` / ``write`` count in; else they count
    across all the checkpoint's files."""
    free_bytes: int | None = None
    steps_in_flight: int | None = None
    """A save written on a background thread (an asynchronous checkpoint): the training is held this many steps
    after the step the save was handed (default 0: at its next step) and the fault at its place waits for it
    there."""
    op: int | None = None
    model: str = "ordered"
    rank: int = -1
    """rank-skew: the rank held mid-save (and, for ``offset``, whose epoch is shifted); -1 is the last."""
    variant: str = "kill"
    offset: int = 1
    grace: int | float | str = 30
    """preemption: how long the job has between the signal and the SIGKILL (seconds, or ``90s``, ``2m``)."""
    signal: str = "SIGTERM"
    """preemption: the signal sent (Slurm's ``--signal``, a spot instance's notice)."""
    target: str = "all"
    """preemption: who gets the signal: ``all`` (the launcher and every rank) or ``launcher`` (its first process)."""
    node: int | None = None
    """A multi-node job: only this node loses power (power-loss) or is killed while the others run on (kill);
    -1 is the last node; None: the whole job."""

    def check(self, where: str) -> None:
        """The checks every fault kind shares; a kind checks the keys only it takes (``FaultKind.check``)."""
        if not whole(self.save, -10**9) or self.save == 0:
            raise UsageError(f"{where}: trigger.save must be a whole number >= 1 (or negative, -N: the N-th save from the end "
                             f"of the uninterrupted run), got {shown(self.save)}")
        if self.step is not None and not whole(self.step, 0):
            raise UsageError(f"{where}: trigger.step must be a whole number >= 0 (the first save at or after that "
                             f"step), got {shown(self.step)}")
        if self.after is not None and duration_s(self.after) is None:
            raise UsageError(f"{where}: trigger.after must be a time into the run such as 90s, 45m or 2h, "
                             f"got {shown(self.after)}")
        if self.step is not None and self.after is not None:
            raise UsageError(f"{where}: trigger.step and trigger.after both place the fault; give one of them")
        if not isinstance(self.fraction, (int, float)) or isinstance(self.fraction, bool) or not 0 <= self.fraction < 1:
            raise UsageError(f"{where}: trigger.fraction must be a number in [0, 1), got {shown(self.fraction)}")
        if self.file is not None and (not isinstance(self.file, str) or not self.file or "/" in self.file):
            raise UsageError(f"{where}: trigger.file must be a file name such as optimizer.pt, got {shown(self.file)}")
        for key, least in (("write", 1), ("free_bytes", 0), ("op", 0), ("steps_in_flight", 0)):
            value = getattr(self, key)
            if value is not None and not whole(value, least):
                raise UsageError(f"{where}: trigger.{key} must be a whole number >= {least}, got {shown(value)}")
        if self.node is not None and not whole(self.node, -1):
            raise UsageError(f"{where}: trigger.node must be a node rank, or -1 for the last, got {shown(self.node)}")
