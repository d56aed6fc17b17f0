"""A multi-node verdict names nodes: which node each rank ran on, where the fault fired, and in every
finding that names a rank, that rank's node too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.result import Trial

_RANK = re.compile(r"\brank (\d+)\b(?! on node)")


def rank_nodes(trial: Trial) -> Dict[int, int]:
    """rank -> node, from the runs' mirrored event files (``events.<rank>.<pid>.n<node>.jsonl``)."""
    out: Dict[int, int] = {}
    for run in trial.runs:
        events = Path(run.events)
        if not events.is_dir():
            continue
        for path in events.glob("events.*.*.n*.jsonl"):
            rank = path.name.split(".")[1]
            if rank.isdigit():
                out[int(rank)] = int(path.name.split(".")[3][1:])
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
    if trial.fault is not None and trial.fault.get("rank") in nodes:
        trial.fault["node"] = nodes[trial.fault["rank"]]

    def named(text: str) -> str:
        return _RANK.sub(lambda m: m.group(0) + (f" on {cluster.name(nodes[int(m.group(1))])}"
                                                 if int(m.group(1)) in nodes else ""), text)

    for finding in trial.findings:
        finding.message = named(finding.message)
    if trial.detail:
        trial.detail = named(trial.detail)

