"""The typed, versioned result document of a trial (``"format": 1``, in the envelope of ``envelope.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional

Status = Literal["passed", "failed", "inconclusive"]
Outcome = Literal["last-good", "older", "scratch", "crashed", "unknown-state", "survived"]
"""Where the resumed job started: the last good checkpoint; an older one (work lost);
from scratch; it crashed before training; from a state no run recorded; or the fault
did not stop the job at all."""
Reason = Literal[
    "fault-not-triggered",
    "reference-failed",
    "timeout",
    "agent-not-loaded",
    "no-steps-recorded",
    "stale-checkpoint",
    "baseline-nondeterministic",
    "resume-took-no-steps",
    "survivors",
    "disk-full",
    "node-lost",
]
"""Why a verdict could not be established (status ``inconclusive``)."""


@dataclass
class Finding:
    """One thing the user can act on; ``details`` carries the evidence."""

    kind: str
    message: str
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.details}


@dataclass
class RunRecord:
    """One process tree chaosckpt started: the command, how it ended, where its logs are."""

    name: str
    command: List[str]
    returncode: Optional[int]
    duration_s: float
    timed_out: bool
    fault_fired: bool
    survivors: int
    stdout: str
    stderr: str
    events: str
    cached: bool = False
    """A reference run reused from an earlier one (a suite's, or the project's cache): its time is not this trial's."""
    stopped: bool = False
    """Its horizon stopped it (and the conductor killed it there): not a crash."""
    stop: Optional[Dict[str, Any]] = None
    """The horizon it was given (``CHAOSCKPT_STOP``); null: it ran to its end."""
    shared: bool = False
    """A suite's faulted run that several trials rebuilt their faults from (``trial.shared``): its time is
    the suite's, counted once, not each trial's."""


@dataclass
class Trial:
    """The verdict of one scenario applied once."""

    scenario: str
    status: Status
    headline: str
    reason: Optional[Reason] = None
    detail: Optional[str] = None
    params: Dict[str, Any] = field(default_factory=dict)
    fault: Optional[Dict[str, Any]] = None
    last_good_step: Optional[int] = None
    recovered_step: Optional[int] = None
    outcome: Optional[Outcome] = None
    error: Optional[str] = None
    error_path: Optional[str] = None
    lost_steps: Optional[int] = None
    reproduced: Optional[bool] = None
    first_divergent_step: Optional[int] = None
    max_loss_diff: Optional[float] = None
    compared_steps: int = 0
    horizon: Optional[int] = None
    """Steps compared after the resume point at most; null: every run went to the job's end."""
    tolerance: float = 0.0
    findings: List[Finding] = field(default_factory=list)
    ranks: List[Dict[str, Any]] = field(default_factory=list)
    """Multi-rank jobs: per rank, where it resumed from, whether it reproduced, where it stopped."""
    runs: List[RunRecord] = field(default_factory=list)
    results_dir: str = ""
    sweep: Optional[List[Dict[str, Any]]] = None
    """With ``--sweep``: one row per crash point (operation, files on disk, outcome where resumed)."""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> Dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["passed"] = self.passed
        doc["findings"] = [f.to_dict() for f in self.findings]
        return doc


def document(trials: List[Trial], skipped: Optional[List[Dict[str, str]]] = None) -> Dict[str, Any]:
    """The whole result document, as written to ``result.json`` and printed by ``--json``; a suite's also lists
    the trials it ``skipped`` (id, scenario, reason)."""
    import socket

    from chaosckpt.conductor.results.envelope import envelope

    extra = {"skipped": skipped} if skipped else {}
    return envelope(hostname=socket.gethostname(), trials=[t.to_dict() for t in trials], **extra)
