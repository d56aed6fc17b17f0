"""``preempt``: at its place in a save the job gets a scheduler's signal (SIGTERM), a grace period to save and
exit, then the SIGKILL of what is left (``runs.signalling``)."""

from __future__ import annotations

from typing import Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming, FaultKind
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS, Trigger, duration_s
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs import signalling
from chaosckpt.conductor.runs.runlog import RunLog


class Preempt(FaultKind):
    name = "preempt"
    scenario = "preemption"
    trigger_keys = (*PLACEMENT_KEYS, "fraction", "write", "file", "grace", "signal", "target")
    agent_kind = "preempt"

    def check(self, trigger: Trigger, where: str) -> None:
        if duration_s(trigger.grace) is None:
            raise UsageError(f"{where}: trigger.grace must be the seconds between the signal and the SIGKILL, such as "
                             f"30, 0.5 or 2m, got {shown(trigger.grace)}")
        if signalling.signal_named(trigger.signal) is None:
            raise UsageError(f"{where}: trigger.signal must name a signal a job can handle, such as SIGTERM, SIGUSR1 "
                             f"or SIGINT, got {shown(trigger.signal)} (a SIGKILL is kill9-mid-save)")
        if trigger.target not in signalling.TARGETS:
            raise UsageError(f"{where}: trigger.target must be one of {', '.join(signalling.TARGETS)}, "
                             f"got {shown(trigger.target)}")

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        if how.cluster is not None:
            raise arming.NotArmable("preemption signals the job's processes on this machine; a job spread over "
                                    "several machines is not preempted yet: run it on one, or use node-loss")
        return super().arm(trigger, reference, how)

    def preempts(self, trigger: Trigger) -> Optional[signalling.Preemption]:
        return signalling.Preemption(signalling.signal_named(trigger.signal) or 0, trigger.target,
                                     duration_s(trigger.grace) or 0.0)


KIND = Preempt()
