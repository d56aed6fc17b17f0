"""``kill``: the job is held still part-way through a save and its whole tree SIGKILLed (``kill9-mid-save``)."""

from __future__ import annotations

from chaosckpt.conductor.faults.kind import FaultKind
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS


class Kill(FaultKind):
    name = "kill"
    scenario = "kill9-mid-save"
    trigger_keys = (*PLACEMENT_KEYS, "fraction", "write", "node", "file", "steps_in_flight")
    sweepable = True
    takes_node = True
    shareable = True


KIND = Kill()
