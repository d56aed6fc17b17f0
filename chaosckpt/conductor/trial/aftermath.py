"""Step 4: after a power loss, the checkpoint directories as a real disk would hold them, and the checkpoint it took."""

from __future__ import annotations

import dataclasses
import os
from typing import List, NamedTuple, Optional, Tuple

from chaosckpt.conductor.disk import copies, crash, journal
from chaosckpt.conductor.nodes import power
from chaosckpt.conductor.results.result import FaultRecord, Finding
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted


class Aftermath(NamedTuple):
    """What the disk holds when the power comes back: the fault record's additions (the node struck, the
    crash model, each file's size) and the files whose durability cannot be judged."""

    fault: FaultRecord
    findings: Tuple[Finding, ...]

    def applied(self, run: Faulted) -> Faulted:
        """The faulted run with its fault record as the power loss left the files."""
        return dataclasses.replace(run, fault={**run.fault, **self.fault})


def aftermath(ctx: Context, armed: Armed, run: Faulted) -> Optional[Aftermath]:
    """After a power loss (of one node, or of the machine), what the disk holds; None for other faults."""
    if armed.cut is not None and armed.cut.model is not None:
        return node_power_loss(ctx, armed, run)
    if ctx.scenario.kind.needs_aftermath:
        return power_loss(ctx, armed, run.log)
    return None


def power_loss(ctx: Context, armed: Armed, faulted: RunLog) -> Aftermath:
    """Rewrite the checkpoint directories into what the disk holds when the power comes back: the saving
    processes' writes as the durability model keeps them, other processes' (a data-preparation step) as they
    left them. The fault record lists the checkpoint's files alone, those a native writer made included; the
    journal's operations the rebuild refused are a finding."""
    disk, work = armed.disk, armed.work
    model = ctx.scenario.trigger.model
    saving = _written_since_saving(armed.roots, faulted)  # before the power cut rewrites every file
    entries, native = crash.power_cut(disk, faulted.save_ops(), model, armed.roots, work, armed.end, armed.native)
    mine = faulted.checkpoint_files()
    native = [path for path in native if mine(path) or path in saving]
    shown = set(native)
    left = _left(work, model, {e.path: e.length for e in entries if mine(e.path) or e.path in shown}, native)
    refused = journal.finding(faulted.dropped_ops() + disk.refused, armed.shown)
    return left._replace(findings=(*left.findings, *refused))


def _written_since_saving(roots: List[str], log: RunLog) -> set:
    """The files under ``roots`` last written once the job's first checkpoint had begun: a file the journal never
    saw written among them is a native writer's file of the checkpoint, not the job's script or input data (there
    before any save)."""
    began = [s.ts for p in log.ranks().values() for s in p.saves]
    found = set()
    for root in roots if began else ():
        for parent, _, files in os.walk(root):
            for name in files:
                path = os.path.join(parent, name)
                if os.lstat(path).st_mtime >= min(began):
                    found.add(path)
    return found


def node_power_loss(ctx: Context, armed: Armed, run: Faulted) -> Aftermath:
    """One node's power loss: that node has rewritten its own folders; what they hold, with its journal
    replayed here too, so a lost checkpoint can be named with the fsync it lacked."""
    cut, result = armed.cut, run.result
    for op in power.node_ops(run.log, result.events_dir, cut.node):
        armed.disk.apply(op)
    report = getattr(result, "rewritten", None) or {"files": {}, "native": []}
    left = _left(armed.work, cut.model, report["files"], report["native"])
    refused = journal.finding(run.log.dropped_ops() + armed.disk.refused, armed.shown)
    return left._replace(fault={"node": cut.node, **left.fault}, findings=(*left.findings, *refused))


def _left(work, model: str, files: dict, native: List[str]) -> Aftermath:
    findings = tuple(
        Finding(
            "not-interposed",
            f"{rel(path, work)} was written by code chaosckpt cannot see (native writes, such as "
            "safetensors'), so the power-loss model left it as the job wrote it: its durability is not judged",
            {"path": rel(path, work)},
        )
        for path in native
    )
    return Aftermath({"model": model, "files": {rel(path, work): length for path, length in files.items()}}, findings)


def lost_checkpoint(ctx: Context, save, ops: List[dict], armed: Armed, error_path: Optional[str]) -> Optional[Finding]:
    """The acknowledged checkpoint the power loss took, named with the fsync it lacked (the file the resume
    read, ``error_path``, first); None when the crash model holds every file of it and each survives whole: the
    checkpoint was durable, whatever the resume then did with it."""
    disk, work = armed.disk, armed.work
    paths = copies.final_paths(save, ops)
    path = paths[0] if paths else None
    model = ctx.scenario.trigger.model
    name = ", ".join(rel(p, work) or p for p in paths) or "a file object"
    files = sorted(p for p in disk.names if path and p.startswith(path + os.sep)) if save.path else []
    candidates = files or sorted(paths, key=lambda p: rel(p, work) != error_path)  # what the resume read
    why = None
    for candidate in candidates:
        why = crash.missing_durability(disk, candidate, model, lambda p: rel(p, work))
        if why is not None:
            if candidate != path or len(paths) > 1:
                why = f"{rel(candidate, work)}: {why}"
            break
    if why is None and candidates and all(c in disk.names for c in candidates):
        return None
    return Finding(
        "acknowledged-checkpoint-lost",
        f"the checkpoint of step {save.step} ({name}) was acknowledged, its save had returned, but it did not "
        f"survive the power loss under the {model} model: {why or 'it was not on disk'}",
        {"path": name, "step": save.step, "model": model, "missing": why},
    )
