"""A multi-node verdict names nodes: which node each rank ran on, where the fault fired, and in every
finding that names a rank, that rank's node too."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, Tuple

from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.results.result import RankRecord, Trial

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


def name_nodes(trial: Trial, cluster: Cluster) -> Trial:
    """``trial`` with each rank's node in it: the rank entries, the fault, the findings' and detail's words."""
    nodes = rank_nodes(trial)
    if not nodes:
        return trial
    ranks = [_placed(entry, nodes, cluster) for entry in trial.ranks]
    fault = trial.fault
    if fault is not None and fault.get("node") is None and fault.get("rank") in nodes:
        fault = {**fault, "node": nodes[fault["rank"]]}

    def named(text: str) -> str:
        return _RANK.sub(lambda m: m.group(0) + (f" on {cluster.name(nodes[int(m.group(1))])}"
                                                 if int(m.group(1)) in nodes else ""), text)

    node = (fault or {}).get("node")
    findings = []
    for finding in trial.findings:
        finding = dataclasses.replace(finding, message=named(finding.message))
        if finding.kind == "acknowledged-checkpoint-lost" and node is not None:
            finding = dataclasses.replace(finding, details={**finding.details, "node": node},
                                          message=f"on {cluster.name(node)}, {finding.message}")
        findings.append(finding)
    detail = named(trial.detail) if trial.detail else trial.detail
    return dataclasses.replace(trial, ranks=ranks, fault=fault, findings=findings, detail=detail)


def _placed(entry: RankRecord, nodes: Dict[int, int], cluster: Cluster) -> RankRecord:
    """A rank's entry with the node it ran on, and that node's machine when the cluster names them."""
    if entry.get("rank") not in nodes:
        return entry
    placed: RankRecord = {**entry, "node": nodes[entry["rank"]]}
    if cluster.hosts:
        placed["host"] = cluster.hosts[nodes[entry["rank"]]]
    return placed
