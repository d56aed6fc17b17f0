"""Step 2: from the scenario and the reference run to the armed fault and the faulted run's sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from chaosckpt import protocol
from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.kind import Arming
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs import confinement
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.options import Stop


@dataclass
class Armed:
    """The fault spec, the sandbox it runs in, and the checkpoint directories it watches."""

    fault: protocol.FaultSpec
    work: Path
    roots: List[str]
    """Checkpoint directories of the sandbox, absolute."""
    disk: Optional["crash.Disk"]
    """The checkpoint directories as the journal starts them, when the scenario needs the journal."""
    full_bytes: int
    """Bytes the faulted save wrote in the reference run."""
    file_bytes: Dict[str, int] = field(default_factory=dict)
    """Bytes each of its files got there, by path relative to the working directory."""
    cut: Optional[NodeFault] = None
    """A power loss of one node of a multi-node job, which that node applies to its own folders."""
    end: Optional["crash.Disk"] = None
    """Where a suite's shared run left each file's data, when the fault was rebuilt from it (``shared``)."""
    native: Optional[List[str]] = None
    """The files that shared run's journal never saw written (``crash.unseen``), in this sandbox."""

    def shown(self, path: str) -> str:
        """``path`` as the user knows it: relative to the sandbox when inside it."""
        return rel(path, self.work) or path


def arm(ctx: Context, reference: RunLog) -> Armed:
    scen = ctx.scenario
    journal = scen.kind.needs_journal(scen.trigger, ctx.opts.sweep)
    ckpt_dirs = arming.checkpoint_dirs(reference, ctx.opts.ckpt_dirs)
    work = ctx.sandbox("faulted")
    roots = [str((work / rel).resolve()) for rel in ckpt_dirs]
    if journal:
        confinement.require_inside(roots, work)
    try:
        how = Arming(work, roots if journal else None, ctx.opts.sweep, Path(ctx.runs[0].events), ctx.opts.cluster)
        fault, cut = scen.kind.arm(scen.trigger, reference, how)
    except arming.NotArmable as exc:
        raise Stop("fault-not-triggered", str(exc)) from None
    full = arming.full_bytes(reference, scen.trigger.save)
    disk = crash.Disk.scan(roots) if journal else None
    return Armed(fault, work, roots, disk, full, file_bytes=arming.file_bytes(reference, scen.trigger.save), cut=cut)
