"""``node-power-loss``: a ``power-loss`` with ``trigger.node``: that node loses power and rewrites its own
checkpoint folders (those its ranks saved into in the uninterrupted run) under the crash model; every other
node keeps its files as the job left them."""

from __future__ import annotations

from typing import Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming, Needs
from chaosckpt.conductor.faults.node_loss import arm_on_node
from chaosckpt.conductor.faults.power_loss import PowerLoss
from chaosckpt.conductor.faults.trigger import Trigger
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs.runlog import RunLog


class NodePowerLoss(PowerLoss):
    name = "node-power-loss"
    shareable = False
    needs = Needs(nodes=2)

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        node, own, spec = arm_on_node(super().arm, trigger, reference, how)
        roots = [str((how.work / rel).resolve()) for rel in arming.checkpoint_dirs(own, [])]
        return spec, NodeFault(node, trigger.model, roots)


KIND = NodePowerLoss()
