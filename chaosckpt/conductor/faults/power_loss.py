"""``power-loss``: the whole job is SIGKILLed just after a save returns (or after operation ``op`` of it),
then its checkpoint folders are rewritten as a disk holds them when the power comes back."""

from __future__ import annotations

from typing import Dict

from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults.kind import FaultKind
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS, Trigger
from chaosckpt.conductor.runs.runlog import Save

MODELS = ("ordered", "strict")
"""The durability models a power loss rewrites the disk under (``disk.crash``)."""


class PowerLoss(FaultKind):
    name = "power-loss"
    scenario = "power-loss"
    trigger_keys = (*PLACEMENT_KEYS, "op", "model", "node")
    sweepable = True
    takes_node = True
    shareable = True
    needs_aftermath = True

    def check(self, trigger: Trigger, where: str) -> None:
        if trigger.model not in MODELS:
            raise UsageError(f"{where}: trigger.model must be one of {', '.join(MODELS)}, got {shown(trigger.model)}")

    def needs_journal(self, trigger: Trigger, sweep: bool) -> bool:
        return True

    def placement(self, trigger: Trigger, target: Save, sweep: bool) -> Dict:
        return {"after_save": True} if sweep or trigger.op is None else {"at_op": trigger.op}

    def crash_model(self, trigger: Trigger) -> str:
        return trigger.model


KIND = PowerLoss()
