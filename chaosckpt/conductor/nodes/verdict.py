"""A multi-node verdict names nodes: which node each rank ran on, where the fault fired, and in every
finding that names a rank, that rank's node too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Tuple

from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.results.result import Trial

_RANK = re.compile(r"\brank (\d+)\b(?! on node)")


def process_nodes(events: Path) -> Dict[Tuple[str, int], int]:
    """(rank, pid) -> node for one run, from its mirrored event files (``events.<rank>.<pid>.n<node>.jsonl``)."""
    out = {}
    for path in Path(events).glob("events.*.*.n*.jsonl"):
        rank, pid, node = path.name.split(".")[1:4]
        out[(rank, int(pid))] = int(node[1:])
    return out


def rank_nodes(trial: Trial) -> Dict[int, int]:
    """rank -> node, over every run of the trial."""
    out: Dict[int, int] = {}
    for run in trial.runs:
        for (rank, _), node in process_nodes(Path(run.events)).items():
            if rank.isdigit():
                out[int(rank)] = node
    return out


def name_nodes(trial: Trial, cluster: Cluster) -> None:
    """Put each rank's node into the verdict: the rank entries, the fault, the findings' and detail's words."""
    nodes = rank_nodes(trial)
    if not nodes:
        return
    for entry in trial.ranks:
        if entry.get("rank") in nodes:
            entry["node"] = nodes[entry["rank"]]
            if cluster.hosts:
                entry["host"] = cluster.hosts[nodes[entry["rank"]]]
    if trial.fault is not None and trial.fault.get("node") is None and trial.fault.get("rank") in nodes:
        trial.fault["node"] = nodes[trial.fault["rank"]]

    def named(text: str) -> str:
        return _RANK.sub(lambda m: m.group(0) + (f" on {cluster.name(nodes[int(m.group(1))])}"
                                                 if int(m.group(1)) in nodes else ""), text)

    node = (trial.fault or {}).get("node")
    for finding in trial.findings:
        finding.message = named(finding.message)
        if finding.kind == "acknowledged-checkpoint-lost" and node is not None:
            finding.details["node"] = node
            finding.message = f"on {cluster.name(node)}, {finding.message}"
    if trial.detail:
        trial.detail = named(trial.detail)

