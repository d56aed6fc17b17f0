"""``eval-left-on``: a clean kill just after a save returns; the resumed job's restored modules are put in
eval mode, as a validation pass before training would."""

from __future__ import annotations

from typing import Dict, Optional

from chaosckpt import protocol
from chaosckpt.conductor.faults.kind import FaultKind
from chaosckpt.conductor.faults.trigger import Trigger
from chaosckpt.conductor.runs.runlog import Save


class EvalLeftOn(FaultKind):
    name = "eval-left-on"
    scenario = "eval-left-on"

    def placement(self, trigger: Trigger, target: Save, sweep: bool) -> Dict:
        return {"after_save": True}

    def resume_fault(self) -> Optional[protocol.FaultSpec]:
        return protocol.fault_spec("eval", 1, after_load=True)


KIND = EvalLeftOn()
