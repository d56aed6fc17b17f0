"""Step 4: after a power loss, the checkpoint directories as a real disk would hold them, and the checkpoint it took."""

from __future__ import annotations

import os
from typing import List

from chaosckpt.conductor.disk import copies, crash
from chaosckpt.conductor.nodes import power
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted


def power_loss(ctx: Context, armed: Armed, faulted: RunLog) -> None:
    """Rewrite the checkpoint directories into what the disk holds when the power comes back."""
    disk, work = armed.disk, armed.work
    model = ctx.scenario.trigger.model
    entries, native = crash.power_cut(disk, faulted.ops(), model, armed.roots, armed.end, armed.native)
    _record(ctx, work, model, {e.path: e.length for e in entries}, native)


def node_power_loss(ctx: Context, armed: Armed, run: Faulted) -> None:
    """One node's power loss: that node has rewritten its own folders; record what they hold, and replay its
    journal here too, so a lost checkpoint can be named with the fsync it lacked."""
    cut, result = armed.cut, run.result
    for op in power.node_ops(run.log, result.events_dir, cut.node):
        armed.disk.apply(op)
    report = getattr(result, "rewritten", None) or {"files": {}, "native": []}
    ctx.trial.fault["node"] = cut.node
    _record(ctx, armed.work, cut.model, report["files"], report["native"])


def _record(ctx: Context, work, model: str, files: dict, native: List[str]) -> None:
    for path in native:
        ctx.trial.findings.append(Finding(
            "not-interposed",
            f"{rel(path, work)} was written by code chaosckpt cannot see (native writes, such as "
            "safetensors'), so the power-loss model left it as the job wrote it: its durability is not judged",
            {"path": rel(path, work)},
        ))
    ctx.trial.fault["model"] = model
    ctx.trial.fault["files"] = {rel(path, work): length for path, length in files.items()}


def lost_checkpoint(ctx: Context, save, ops: List[dict], armed: Armed) -> Finding:
    """The acknowledged checkpoint the power loss took, named with the fsync it lacked."""
    disk, work = armed.disk, armed.work
    paths = copies.final_paths(save, ops)
    path = paths[0] if paths else None
    model = ctx.scenario.trigger.model
    name = ", ".join(rel(p, work) or p for p in paths) or "a file object"
    files = sorted(p for p in disk.names if path and p.startswith(path + os.sep)) if save.path else []
    candidates = files or sorted(paths, key=lambda p: rel(p, work) != ctx.trial.error_path)  # what the resume read
    why = None
    for candidate in candidates:
        why = crash.missing_durability(disk, candidate, model, lambda p: rel(p, work))
        if why is not None:
            if candidate != path or len(paths) > 1:
                why = f"{rel(candidate, work)}: {why}"
            break
    return Finding(
        "acknowledged-checkpoint-lost",
        f"the checkpoint of step {save.step} ({name}) was acknowledged, its save had returned, but it did not "
        f"survive the power loss under the {model} model: {why or 'it was not on disk'}",
        {"path": name, "step": save.step, "model": model, "missing": why},
    )
