"""``enospc``: the disk fills part-way through a save, at one write or, with ``free_bytes``, for good."""

from __future__ import annotations

from typing import Dict

from chaosckpt.conductor.faults.kind import FaultKind
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS, Trigger
from chaosckpt.conductor.runs.runlog import Save


class Enospc(FaultKind):
    name = "enospc"
    scenario = "enospc"
    trigger_keys = (*PLACEMENT_KEYS, "fraction", "write", "free_bytes", "file", "steps_in_flight")
    agent_kind = "enospc"
    sweepable = True
    fills_disk = True

    def placement(self, trigger: Trigger, target: Save, sweep: bool) -> Dict:
        if not sweep and trigger.free_bytes is not None:
            return {"kind": "disk-full", "free_bytes": trigger.free_bytes}
        return super().placement(trigger, target, sweep)


KIND = Enospc()
