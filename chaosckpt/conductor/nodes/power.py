"""One node's part of a multi-node run: its processes and their journal operations (the node faults,
``faults.node_loss`` and ``faults.node_power_loss``, are placed in them)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor.nodes.node_names import process_nodes
from chaosckpt.conductor.runs.runlog import RunLog


def _rank(rank: Optional[int]) -> str:
    return "x" if rank is None else str(rank)


def node_log(log: RunLog, events: Path, node: int) -> RunLog:
    """The processes of ``log`` that ran on ``node``, as the events folder ``events`` tells their nodes."""
    nodes = process_nodes(events)
    return RunLog([p for p in log.processes if nodes.get((_rank(p.rank), p.pid)) == node])


def node_ops(log: RunLog, events: Path, node: int) -> List[dict]:
    """The journal operations of ``node``'s processes, in order."""
    return node_log(log, events, node).ops()
