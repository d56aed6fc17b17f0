"""``node-power-loss``: a ``power-loss`` with ``trigger.node``: that node loses power and rewrites its own
checkpoint folders (those its ranks saved into in the uninterrupted run) under the crash model; every other
node keeps its files as the job left them."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming
from chaosckpt.conductor.faults.node_loss import node_reference
from chaosckpt.conductor.faults.power_loss import PowerLoss
from chaosckpt.conductor.faults.trigger import Trigger
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs.runlog import RunLog


class NodePowerLoss(PowerLoss):
    name = "node-power-loss"
    shareable = False

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        node, own = node_reference(trigger, reference, how)
        spec, _ = super().arm(trigger, own, dataclasses.replace(how, sweep=False))
        roots = [str((how.work / rel).resolve()) for rel in arming.checkpoint_dirs(own, [])]
        return spec, NodeFault(node, trigger.model, roots)


KIND = NodePowerLoss()
