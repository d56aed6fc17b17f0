"""A suite's plan as stored in ``suite.json``: its commands, its trials and where each faults the job.

It lives with the results, not the suite, so that reports and ``--resume`` read it without the suite's code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from chaosckpt import __version__
from chaosckpt.conductor import params
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.runs import horizon

FORMAT = 1


@dataclass
class PlannedTrial:
    """One trial of the suite: a scenario with parameter overrides, under a folder-safe id."""

    id: str
    scenario: str
    params: Dict[str, Any] = field(default_factory=dict)
    sweep: bool = False
    """Crash after every operation of the save in turn (``chaosckpt run --sweep``)."""
    skipped: Optional[str] = None
    """Why the trial is not run: the scenario needs what the job lacks (more machines, more ranks)."""


@dataclass
class Plan:
    """What a suite runs, stored as ``suite.json`` before any trial starts, so ``--resume`` runs the same."""

    args: List[str]
    """The job as ``chaosckpt run`` takes it, relative to ``workdir``: a script and its arguments, or a command."""
    command: List[str]
    resume_command: List[str]
    resume_option: List[str]
    """How a replay line gives the resume command: ``--resume-args X``, ``--resume-cmd X``, or nothing."""
    workdir: str
    results: str
    timeout: float
    tolerance: float
    nproc: int
    seed: Optional[int]
    trials: List[PlannedTrial]
    reference_key: str
    created: str
    """When the suite started, in ISO 8601 (older suites stored local time as ``2026-12-01 22:49:39``)."""
    hostname: str = field(default_factory=socket.gethostname)
    horizon: Optional[int] = horizon.DEFAULT
    """Steps compared after each resume point; None: every run to the job's end."""
    draw: int = 0
    """Trials per scenario still to be drawn at random points once the reference is in (``--trials``)."""
    flake: int = 0
    """Uninterrupted runs beside the reference, compared with it before any trial (``--flake``)."""
    state: str = "running"
    """``running`` (or interrupted: the process is gone), ``finished``."""
    maps: List[str] = field(default_factory=list)
    """Folders outside ``workdir`` overlaid for the job's writes (see ``confinement``)."""
    exclude: List[str] = field(default_factory=list)
    """Paths under ``workdir`` left out of the sandboxes."""
    share: bool = True
    """Trials that kill the job inside the same save share one faulted run (``trial.shared``)."""
    options: Dict[str, Any] = field(default_factory=dict)
    """The options every trial runs with (``options.trial_spec``); each worker's spec adds its own."""
    executor: str = "local"
    """Where the trials' workers run: ``local`` (this machine) or ``slurm`` (``suite.executors``)."""
    sbatch: List[str] = field(default_factory=list)
    """The ``sbatch`` options of every trial's Slurm job."""
    format: int = FORMAT
    chaosckpt: str = __version__

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Plan":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["trials"] = [PlannedTrial(**t) for t in data["trials"]]
        plan = cls(**values)
        if not plan.options:  # a suite stored before the plan held its trials' options
            plan.options = {"command": plan.command, "resume_command": plan.resume_command, "workdir": plan.workdir,
                            "timeout_s": plan.timeout, "tolerance": plan.tolerance, "horizon": plan.horizon,
                            "exclude": [plan.results, *plan.exclude], "maps": plan.maps}
        return plan

    def replay(self, trial: PlannedTrial) -> str:
        """The one command line that runs exactly this trial again, from the current folder."""
        scen = trial.scenario
        if scen.endswith(".toml") and Path(scen).is_absolute() and Path(self.workdir) in Path(scen).parents:
            scen = os.path.relpath(scen, self.workdir)
        argv = ["chaosckpt", "run", "--scenario", scen]
        for key, value in trial.params.items():
            argv += ["-p", params.param_text(key, value)]
        if trial.sweep:
            argv.append("--sweep")
        argv += self.resume_option
        if self.timeout != 3600.0:
            argv += ["--timeout", f"{self.timeout:g}"]
        if self.tolerance:
            argv += ["--tolerance", f"{self.tolerance:g}"]
        if self.nproc != 1:
            argv += ["--nproc", str(self.nproc)]
        if self.horizon != horizon.DEFAULT:
            argv += ["--horizon", horizon.END if self.horizon is None else str(self.horizon)]
        for kind in self.options.get("ignore", []):
            argv += ["--ignore", kind]
        argv += ["--", *self.args]
        line = shlex.join(argv)
        here = Path.cwd().resolve()
        workdir = Path(self.workdir)
        if workdir == here:
            return line
        where = os.path.relpath(workdir, here) if here in workdir.parents else str(workdir)
        return f"cd {shlex.quote(where)} && {line}"


SHRUNK = "shrunk.json"
"""In a failed trial's folder once it was shrunk (``suite.shrink``): every smaller fault tried, and the smallest that
failed the same way, with its replay line."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-") or "trial"


def trial_ids(names: List[str]) -> List[str]:
    """Folder-safe, unique ids: a repeated id gets ``-2``, ``-3``..."""
    seen: Dict[str, int] = {}
    out = []
    for name in names:
        base = _slug(name)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def scenario_label(name: str) -> str:
    """A scenario's short name: a built-in's name, or a scenario file's stem."""
    return Path(name).stem if name.endswith(".toml") else name


def trial_dir(folder: Path, trial: PlannedTrial) -> Path:
    """Where a suite in ``folder`` keeps this trial's runs and verdict."""
    return folder / "trials" / trial.id


_STATUSES = ("passed", "failed", "inconclusive")
_DAMAGE = (ValueError, KeyError, TypeError, IndexError, AttributeError)
"""What reading a cut short or reshaped state file raises (a file that cannot be read at all is no damage of it)."""


def other_format(path: Path, what: str, found: Any) -> UsageError:
    """The one-line error for a state file of a format this chaosckpt cannot read: written by another (newer)
    chaosckpt, so it is left as it is, never moved aside as damage."""
    return UsageError(f"{path} is a {what} of format {shown(found)}, which this chaosckpt cannot read (it reads "
                      f"format {FORMAT}); read it with the chaosckpt that wrote it")


def _format(path: Path, what: str, doc: Any) -> None:
    """Raise :func:`other_format` when ``doc`` declares a whole-number format other than :data:`FORMAT`."""
    found = doc.get("format", FORMAT) if isinstance(doc, dict) else FORMAT
    if type(found) is int and found != FORMAT:
        raise other_format(path, what, found)


def stored_trial(folder: Path, trial: PlannedTrial) -> Optional[Dict[str, Any]]:
    """The trial's verdict if it finished, else None; a damaged verdict is moved aside, and the trial is to run.
    A verdict of another format is a usage error (see :func:`other_format`)."""
    path = trial_dir(folder, trial) / "result.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        _format(path, "result document", doc)
        if doc["format"] != FORMAT:
            raise ValueError(f"format {shown(doc['format'])}, which is no format")
        found = doc["trials"][0]
        if found["status"] not in _STATUSES or not isinstance(found["headline"], str) or not isinstance(found["runs"], list):
            raise ValueError("a verdict without its status, headline or runs")
        return found
    except _DAMAGE as exc:
        atomic.set_aside(path, f"{type(exc).__name__}: {exc}")
        return None


def load_plan(folder: Path) -> Optional[Dict[str, Any]]:
    """A suite's ``suite.json`` as stored, if it reads back as a plan; a damaged one is moved aside (None), one of
    another format is a usage error (see :func:`other_format`)."""
    path = folder / "suite.json"
    try:
        data = json.loads(path.read_text())
        _format(path, "suite plan", data)
        Plan.from_dict(data)
        return data
    except FileNotFoundError:
        return None
    except _DAMAGE as exc:
        atomic.set_aside(path, f"{type(exc).__name__}: {exc}")
        return None
