"""What a trial is given (``TrialOptions``, built from its JSON spec by ``from_spec``) and how a step ends it early
(``Stop``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from chaosckpt.conductor.nodes.cluster import Cluster
from chaosckpt.conductor.results.result import Reason
from chaosckpt.conductor.runs import horizon
from chaosckpt.conductor.runs.progress import RunProgress


@dataclass
class TrialOptions:
    """How to run the job: the commands, where, and how results are judged."""

    command: List[str]
    resume_command: List[str]
    workdir: Path
    results_dir: Path
    timeout_s: float = 3600.0
    tolerance: float = 0.0
    keep_sandbox: bool = False
    reference: Optional[Path] = None
    """A finished reference run (``cache.run_reference``'s folder) to reuse instead of running one."""
    cache_reference: bool = False
    """Without ``reference``: take the project's cached reference run when one matches the job (``cache``), else
    keep this trial's there for the next."""
    fresh_reference: bool = False
    """With ``cache_reference``: run the reference even when a cached one matches, replacing it."""
    exclude: List[Path] = field(default_factory=list)
    """More paths under ``workdir`` to leave out of the sandboxes, such as the whole results folder."""
    sweep: bool = False
    """Crash after every operation of the save in turn instead of once (see ``sweep``)."""
    max_resumes: int = 8
    """With ``sweep``: full resumes for at most this many classes of crash state (``disk.sweep.classify``)."""
    ckpt_dirs: List[str] = field(default_factory=list)
    """Checkpoint directories (relative to ``workdir``) to watch besides those the reference run saved into."""
    horizon: Optional[int] = horizon.DEFAULT
    """Steps compared after the resume point: every run stops that far past the point it matters for; None
    runs them all to the job's end."""
    progress: Optional[RunProgress] = None
    """Shows each run's progress on a terminal; None keeps quiet."""
    maps: List[Path] = field(default_factory=list)
    """Folders outside ``workdir`` the job writes into, overlaid so the writes land in the sandbox (``--map``)."""
    cluster: Optional[Cluster] = None
    """The machines a multi-node job runs on (``--nnodes``); None: this machine alone."""
    prefix: Optional[Path] = None
    """A suite's shared faulted run of the trial's save (``shared``): the crash state is rebuilt from its
    journal instead of running the job up to the fault again."""
    ignore: List[str] = field(default_factory=list)
    """Finding kinds the user silenced (``--ignore``): listed as ignored, counted toward no verdict."""


_PATHS = ("workdir", "results_dir", "reference", "prefix")
_PATH_LISTS = ("exclude", "maps")


def from_spec(spec: Mapping[str, Any], progress: Optional[RunProgress] = None) -> TrialOptions:
    """A trial's options from their JSON form (``options.trial_spec``, a suite worker's ``spec.json``): the one
    place they are built, whichever way in (``run``, ``chaosckpt.run``, a suite) they came by."""
    known = {f.name for f in fields(TrialOptions)}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"not options of a trial: {', '.join(unknown)}")
    values: Dict[str, Any] = dict(spec)
    for name in _PATHS:
        if values.get(name) is not None:
            values[name] = Path(values[name])
    for name in _PATH_LISTS:
        values[name] = [Path(p) for p in values.get(name, [])]
    if values.get("cluster") is not None:
        values["cluster"] = Cluster(**values["cluster"])
    return TrialOptions(**values, progress=progress)


class Stop(Exception):
    """Ends a trial early with an inconclusive verdict."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP (``signals.Terminated``) ended a trial: what it had done by then, as an
    inconclusive trial (``trial``), for the caller to store before it exits as the signal asks."""

    def __init__(self, cause: KeyboardInterrupt, trial: Any) -> None:
        super().__init__(*cause.args)
        if hasattr(cause, "signum"):
            self.signum = cause.signum
        self.trial = trial
