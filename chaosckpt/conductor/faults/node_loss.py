"""``node-loss``: a ``kill`` with ``trigger.node``: one node's whole tree is SIGKILLed mid-save in a saving rank
of that node, while the other nodes run on."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kill import Kill
from chaosckpt.conductor.faults.kind import Arming, Needs
from chaosckpt.conductor.faults.trigger import Trigger
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.nodes.power import node_log
from chaosckpt.conductor.runs.runlog import RunLog


class NodeLoss(Kill):
    name = "node-loss"
    shareable = False
    needs = Needs(nodes=2)

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        node, _, spec = arm_on_node(super().arm, trigger, reference, how)
        return spec, NodeFault(node, None, [])


def arm_on_node(arm: Callable[[Trigger, RunLog, Arming], Tuple[protocol.FaultSpec, Optional[NodeFault]]],
                trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[int, RunLog, protocol.FaultSpec]:
    """The node ``trigger.node`` names, the reference run of its processes, and the fault ``arm`` places
    there (never a sweep's)."""
    if how.cluster is None or how.reference_events is None:
        raise arming.NotArmable("trigger.node names a node of a multi-node job; run it with --nnodes N")
    node = how.cluster.nnodes - 1 if trigger.node == -1 else trigger.node
    if node >= how.cluster.nnodes:
        raise arming.NotArmable(f"--param node={node}: the job runs on {how.cluster.nnodes} node(s)")
    own = node_log(reference, how.reference_events, node)
    if own.saver() is None or not own.saver().saves:
        raise arming.NotArmable(f"no rank on node {node} saved a checkpoint in the uninterrupted run; a power loss "
                                "there loses nothing; pick a node that saves (--param node=K)")
    spec, _ = arm(trigger, own, dataclasses.replace(how, sweep=False))
    return node, own, spec


KIND = NodeLoss()
