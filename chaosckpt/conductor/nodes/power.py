"""Faults of one node of a multi-node job (``trigger.node``), fired in a saving rank of that node.

``node-power-loss``: the node loses power; the node itself rewrites its own checkpoint folders (those its
ranks saved into in the uninterrupted run) under the crash model, every other node keeps its files as the
job left them. ``node-loss``: the node's whole tree is SIGKILLed mid-save while the other nodes run on."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.nodes.verdict import process_nodes
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.scenario import Scenario


def wanted(scenario: Scenario) -> bool:
    return scenario.fault in ("power-loss", "kill") and scenario.trigger.node is not None


def arm(scenario: Scenario, reference: RunLog, reference_events: Path, cluster: Optional[Cluster],
        track: Optional[List[str]], work: Path) -> Tuple[Dict, NodeFault]:
    """The fault, placed in the target node's saving rank, and what happens to that node."""
    if cluster is None:
        raise arming.NotArmable(scenario.unmet(1, None) or "a node fault needs a multi-node job; run it with --nnodes N")
    nodes = process_nodes(reference_events)
    node = cluster.nnodes - 1 if scenario.trigger.node == -1 else scenario.trigger.node
    if node >= cluster.nnodes:
        raise arming.NotArmable(f"--param node={node}: the job runs on {cluster.nnodes} node(s)")
    own = RunLog([p for p in reference.processes if nodes.get((_rank(p.rank), p.pid)) == node])
    if own.saver() is None or not own.saver().saves:
        raise arming.NotArmable(f"no rank on node {node} saved a checkpoint in the uninterrupted run; a power loss "
                                "there loses nothing; pick a node that saves (--param node=K)")
    fault = arming.arm(scenario, own, track)
    if scenario.fault == "kill":
        return fault, NodeFault(node, None, [])
    roots = [str((work / rel).resolve()) for rel in arming.checkpoint_dirs(own, [])]
    return fault, NodeFault(node, scenario.trigger.model, roots)


def _rank(rank: Optional[int]) -> str:
    return "x" if rank is None else str(rank)


def node_ops(log: RunLog, events: Path, node: int) -> List[dict]:
    """The journal operations of ``node``'s processes, in order."""
    nodes = process_nodes(events)
    return RunLog([p for p in log.processes if nodes.get((_rank(p.rank), p.pid)) == node]).ops()
