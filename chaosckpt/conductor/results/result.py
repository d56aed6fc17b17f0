"""The typed, versioned result document of a trial (``"format": 1``, in the envelope of ``envelope.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, TypedDict

from chaosckpt.protocol import SEVERITY, FindingKind, Severity

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
    "sweep-untried",
    "interrupted",
    "journal-refused",
    "slurm-job-ended",
]
"""Why a verdict could not be established (status ``inconclusive``)."""


class FileState(TypedDict):
    """One file of the fault as the fault left it."""

    bytes: Optional[int]
    """Its size on disk; null: missing."""
    full_bytes: Optional[int]
    """The bytes the uninterrupted run's same save gave it; null: unknown."""
    loads: Optional[bool]
    """Whether it loads as a checkpoint; null: missing, a DCP data shard (never loadable alone: its bytes against
    ``full_bytes`` say whether it is torn), or in no format the load check reads (JSON state)."""


class FaultRecord(TypedDict, total=False):
    """Where the fault struck: the save and step, the write or operation, and the files as it left them."""

    kind: str
    save: int
    step: Optional[int]
    write: int
    bytes: int
    op: int
    free_bytes: int
    path: Optional[str]
    in_file: bool
    """``write`` and ``bytes`` count in the file ``path`` alone (the fault was placed in one file of the save: a
    fraction, or ``file=``), not across the save."""
    files: Dict[str, Optional[int]]
    """Size on disk (null: missing) of every file the job saved to, as the fault left them: the files its save calls
    wrote, the names its renames put in place, and those the fault caught it writing or copying into."""
    file_states: Dict[str, FileState]
    """The same files (before a power loss rebuilt them: absent then) with the bytes they should hold and whether
    they load."""
    model: str
    """The crash model a power loss (or a sweep) rebuilt the disk with."""
    thread: str
    """The thread that was writing the save when the fault struck, when that was not the training thread (an
    asynchronous checkpoint)."""
    steps_in_flight: int
    """The training steps taken between the start of that background save and the fault."""
    held: bool
    """The training thread was held at that step while the fault struck (a save the reference run wrote in the
    background): where both threads stood is the same in every run."""
    noticed: bool
    """The error the fault raised in a background save: whether the job saw it (a future's result raised it, or
    the job ended on it) or trained on without it."""
    node: int
    """The node the fault struck (multi-node jobs)."""
    rank: Optional[int]
    shared: str
    """The suite's shared faulted run the crash state was rebuilt from."""


class _RankVerdict(TypedDict):
    """The fields every rank has (``trial.ranks.RankVerdict``)."""

    rank: int
    outcome: str
    recovered_step: Optional[int]
    reproduced: Optional[bool]
    first_divergent_step: Optional[int]
    compared_steps: int
    steps_taken: int
    last_step: Optional[int]
    last_save: Optional[Dict[str, Any]]
    error: Optional[str]


class RankRecord(_RankVerdict, total=False):
    """One rank of a multi-rank job: where it resumed from, whether it reproduced, where it stopped; on several
    nodes, the node it ran on and its machine."""

    node: int
    host: str


class _CrashPoint(TypedDict):
    op: int
    operation: str
    state: int
    files: List[Dict[str, Any]]
    outcome: Optional[str]


class CrashPointRecord(_CrashPoint, total=False):
    """One crash point of a sweep: after which operation, the disk state it leaves, the class of states a
    restarted job cannot tell apart that it falls in, whether a resume ran on it, that resume's outcome and
    whether it met the scenario's expectation (results written before classes existed hold neither
    ``state_class`` nor ``resumed``, and before ``met``, not that)."""

    state_class: int
    resumed: bool
    met: bool


@dataclass
class Finding:
    """One thing the user can act on; ``details`` carries the evidence."""

    kind: FindingKind
    message: str
    details: Dict[str, Any] = field(default_factory=dict)
    severity: Optional[Severity] = None
    """None: the kind's (``protocol.SEVERITY``); a note where the trial disproved what the kind predicts."""
    ignored: bool = False
    """The user silenced this kind (``ignore``): listed, but it counts toward no verdict."""

    def __post_init__(self) -> None:
        if self.severity is None:
            self.severity = SEVERITY.get(self.kind, "warning")

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "severity": self.severity, "ignored": self.ignored,
                **self.details}


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
    confinement: Optional[str] = None
    """What held it (``confinement.Mode``): bubblewrap, chaosckpt's own namespaces, or only the agent; null: a
    multi-node run, held by each node's machine."""


@dataclass
class Trial:
    """The verdict of one scenario applied once."""

    scenario: str
    status: Status
    headline: str
    reason: Optional[Reason] = None
    detail: Optional[str] = None
    params: Dict[str, Any] = field(default_factory=dict)
    fault: Optional[FaultRecord] = None
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
    ranks: List[RankRecord] = field(default_factory=list)
    """Multi-rank jobs: per rank, where it resumed from, whether it reproduced, where it stopped."""
    runs: List[RunRecord] = field(default_factory=list)
    results_dir: str = ""
    sweep: Optional[List[CrashPointRecord]] = None
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
