"""What a fault kind is: its trigger keys and their checks, how it is armed, what its resume needs, and
which aftermath and findings it calls for. Each kind is a module of ``faults`` with one ``FaultKind``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults import arming
from chaosckpt.conductor.faults.trigger import PLACEMENT_KEYS, Trigger
from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.nodes.conduct import NodeFault
from chaosckpt.conductor.runs import signalling
from chaosckpt.conductor.runs.runlog import RunLog, Save


@dataclass(frozen=True)
class Arming:
    """What arming a fault may need beside the trigger and the reference run."""

    work: Path
    """The faulted run's sandbox."""
    track: Optional[List[str]] = None
    """The checkpoint directories the journal watches, or None when the journal stays off."""
    sweep: bool = False
    """``--sweep``: the job halts just after the save, and every crash point of it is rebuilt from the journal."""
    reference_events: Optional[Path] = None
    """The reference run's events folder, which tells each process's node (multi-node jobs)."""
    cluster: Optional[Cluster] = None


@dataclass(frozen=True)
class Needs:
    """What a job must have for the scenario to mean anything: how many machines (``nodes``) and ranks.
    A job short of them is refused by ``run`` and skipped by ``suite`` before anything runs."""

    nodes: int = 1
    ranks: int = 1

    def check(self, where: str) -> None:
        for key in ("nodes", "ranks"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"{where}: needs.{key} must be a whole number >= 1, got {shown(value)}")

    def at_least(self, other: "Needs") -> "Needs":
        return Needs(max(self.nodes, other.nodes), max(self.ranks, other.ranks))


class FaultKind:
    """One fault kind: the defaults are a fault fired inside a save that needs nothing after the kill."""

    name = ""
    """The ``fault`` value of a scenario that picks this kind."""
    scenario = ""
    """The built-in scenario that shows it."""
    trigger_keys: Tuple[str, ...] = PLACEMENT_KEYS
    """The trigger keys it takes; the others keep their defaults."""
    agent_kind: protocol.AgentFaultKind = "halt"
    """What the agent fires."""
    sweepable = False
    """It stops the job inside a save, so ``--sweep`` can walk the save's crash points."""
    takes_node = False
    """``trigger.node`` makes it a fault of one node of a multi-node job (``faults.kind_of``)."""
    shareable = False
    """A single-process run of it can be rebuilt from a suite's shared faulted run of the same save."""
    needs_aftermath = False
    """The disk is rewritten after the kill, as a power loss leaves it; the trial then looks for lost checkpoints."""
    fills_disk = False
    """It fills the disk: an ENOSPC the job meets is the fault's, not the real disk's."""
    needs = Needs()
    """What any job must have for the kind to mean anything, whatever its scenario file says."""

    def check(self, trigger: Trigger, where: str) -> None:
        """Check the trigger keys only this kind takes (``Trigger.check`` has checked the shared ones)."""

    def needs_journal(self, trigger: Trigger, sweep: bool) -> bool:
        """Whether the faulted run journals its file operations."""
        return sweep or trigger.free_bytes is not None

    def placement(self, trigger: Trigger, target: Save, sweep: bool) -> Dict:
        """The spec's fields that place the fault in save ``target``."""
        return {"after_save": True} if sweep else arming.in_save(trigger, target)

    def arm(self, trigger: Trigger, reference: RunLog, how: Arming) -> Tuple[protocol.FaultSpec, Optional[NodeFault]]:
        """The fault spec of the faulted run, and what happens to its node when it strikes one node."""
        spec, target = arming.start(self.agent_kind, trigger, reference, how.track)
        spec.update(self.placement(trigger, target, how.sweep))  # type: ignore[typeddict-item]
        return spec, None

    def crash_model(self, trigger: Trigger) -> str:
        """The durability model a sweep rebuilds the save's crash points under."""
        return "none"

    def resume_fault(self) -> Optional[protocol.FaultSpec]:
        """The fault armed in the resume run, for kinds whose fault lies in how the job resumes."""
        return None

    def resume_env(self, trigger: Trigger, reference: RunLog) -> Dict[str, str]:
        """Environment the resume run gets."""
        return {}

    def preempts(self, trigger: Trigger) -> Optional[signalling.Preemption]:
        """The signal and grace the job gets when the fault fires, for a kind that preempts it; else None (a kill)."""
        return None

    def hold(self, reference: RunLog, fault: protocol.FaultSpec) -> Optional[Callable[[Path], bool]]:
        """What the kill waits for after the fault fires, besides the flag."""
        return None
