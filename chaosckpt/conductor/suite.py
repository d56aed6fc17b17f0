"""A suite: every configured scenario against one job, one shared reference run, trials in parallel workers.

A suite folder holds everything needed to continue it or to render its reports:

    suite.json         the plan: commands, trials and their fault points, state (rewritten atomically)
    reference/         the reference run every trial reuses (from the cache, or run here)
    trials/<id>/       spec.json (what its worker runs), result.json (its verdict, written atomically),
                       worker.log, and the trial's own runs
    prefixes/save-<k>/ the faulted run shared by the trials that fault save k (``trial.shared``): its journal,
                       its halted sandbox (removed when the suite's trials are done or interrupted) and prefix.json
    result.json        all verdicts in one document, as ``chaosckpt run --json`` prints them

Each trial runs in a worker process (``python -m chaosckpt.conductor.suite SPEC``), so that Ctrl-C
reaches every worker at once and each kills its own job tree, and a worker dies with the suite. A
trial is done when its ``result.json`` exists; ``--resume`` runs the others.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set

from chaosckpt import __version__
from chaosckpt.conductor import (atomic, cache, diskspace, horizon, launcher, leftovers, sandbox, scenario as scenarios,
                                 signals)
from chaosckpt.conductor.errors import ExitCode, exit_code
from chaosckpt.conductor.result import document
from chaosckpt.conductor.runlog import RunLog

FORMAT = 1
POLL_S = 0.05
STOP_WAIT_S = 30.0
"""How long an interrupted worker gets to kill its job tree before it is killed itself."""


@dataclass
class PlannedTrial:
    """One trial of the suite: a scenario with parameter overrides, under a folder-safe id."""

    id: str
    scenario: str
    params: Dict[str, Any] = field(default_factory=dict)
    sweep: bool = False
    """Crash after every operation of the save in turn (``chaosckpt run --sweep``)."""


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
    state: str = "running"
    """``running`` (or interrupted: the process is gone), ``finished``."""
    maps: List[str] = field(default_factory=list)
    """Folders outside ``workdir`` overlaid for the job's writes (see ``confinement``)."""
    exclude: List[str] = field(default_factory=list)
    """Paths under ``workdir`` left out of the sandboxes."""
    share: bool = True
    """Trials that kill the job inside the same save share one faulted run (``trial.shared``)."""
    format: int = FORMAT
    chaosckpt: str = __version__

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Plan":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["trials"] = [PlannedTrial(**t) for t in data["trials"]]
        return cls(**values)

    def replay(self, trial: PlannedTrial) -> str:
        """The one command line that runs exactly this trial again, from the current folder."""
        scen = trial.scenario
        if scen.endswith(".toml") and Path(scen).is_absolute() and Path(self.workdir) in Path(scen).parents:
            scen = os.path.relpath(scen, self.workdir)
        argv = ["chaosckpt", "run", "--scenario", scen]
        for key, value in trial.params.items():
            argv += ["-p", f"{key}={json.dumps(value)}"]
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
        argv += ["--", *self.args]
        line = shlex.join(argv)
        here = Path.cwd().resolve()
        workdir = Path(self.workdir)
        if workdir == here:
            return line
        where = os.path.relpath(workdir, here) if here in workdir.parents else str(workdir)
        return f"cd {shlex.quote(where)} && {line}"


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


def random_points(base: PlannedTrial, count: int, seed: int, saves: int, keys: tuple) -> List[PlannedTrial]:
    """``count`` copies of ``base`` with the fault at seeded random points: a save in 1..``saves`` and,
    where the fault takes one, a fraction of its bytes. The same seed and reference give the same points."""
    trials = []
    width = len(str(count))
    for i in range(1, count + 1):
        rng = random.Random(f"{seed}/{base.id}/{i}")
        params = {k: v for k, v in base.params.items() if k not in ("save", "fraction", "write")}
        params["save"] = rng.randint(1, max(saves, 1))
        if "fraction" in keys:
            params["fraction"] = rng.randrange(1000) / 1000
        trials.append(PlannedTrial(f"{base.id}-r{i:0{width}d}", base.scenario, params))
    return trials


def trigger_keys(scenario_name: str) -> tuple:
    """The trigger keys the scenario's fault takes (where the scenario module declares them)."""
    fault = scenarios.load(scenario_name).fault
    return getattr(scenarios, "TRIGGER_KEYS", {}).get(fault, ("save", "fraction", "write"))


def completed_saves(reference_dir: Path) -> int:
    """How many checkpoint saves the reference run completed: the range random faults are placed in."""
    saver = RunLog.read(reference_dir / "events").saver()
    return len(saver.completed_saves()) if saver is not None else 0


@dataclass
class Finished:
    """A trial whose worker ended: its verdict document, or why there is none."""

    planned: PlannedTrial
    trial: Optional[Dict[str, Any]]
    returncode: int
    log: Path


class Suite:
    """Runs a planned suite in its folder: the reference, then every trial not yet done."""

    def __init__(self, folder: Path, plan: Plan, jobs: int = 1, keep_sandbox: bool = False) -> None:
        self.folder = folder
        self.plan = plan
        self.jobs = jobs
        self.keep_sandbox = keep_sandbox
        self.selected: Optional[Set[str]] = None
        """With ``-k`` on a resumed suite: the ids of the pending trials to run now; None runs them all."""

    @classmethod
    def open(cls, folder: Path, **kwargs: Any) -> "Suite":
        data = json.loads((folder / "suite.json").read_text())
        return cls(folder, Plan.from_dict(data), **kwargs)

    def save_plan(self) -> None:
        atomic.write_text(self.folder / "suite.json", json.dumps(self.plan.to_dict(), indent=2) + "\n")

    def trial_dir(self, trial: PlannedTrial) -> Path:
        return self.folder / "trials" / trial.id

    def stored(self, trial: PlannedTrial) -> Optional[Dict[str, Any]]:
        """The trial's verdict if it finished, else None."""
        path = self.trial_dir(trial) / "result.json"
        if not path.is_file():
            return None
        return json.loads(path.read_text())["trials"][0]

    def pending(self) -> List[PlannedTrial]:
        return [t for t in self.plan.trials if self.stored(t) is None]

    def _spec(self, trial: PlannedTrial, folder: Optional[Path] = None, prefix: Optional[Path] = None) -> Path:
        """The worker's spec in a fresh ``folder`` (the trial's); with ``prefix``, the shared faulted run it rebuilds
        its fault from, or the folder where that run is made when ``folder`` is ``prefix``."""
        folder = folder or self.trial_dir(trial)
        if folder.exists():
            shutil.rmtree(folder)  # what an interrupted worker left: redo it from the start
        folder.mkdir(parents=True)
        spec = {
            "scenario": trial.scenario,
            "params": trial.params,
            "command": self.plan.command,
            "resume_command": self.plan.resume_command,
            "workdir": self.plan.workdir,
            "results_dir": str(folder),
            "timeout": self.plan.timeout,
            "tolerance": self.plan.tolerance,
            "nproc": self.plan.nproc,
            "keep_sandbox": self.keep_sandbox or folder == prefix,
            "reference": str(self.folder / "reference"),
            "horizon": self.plan.horizon,
            "exclude": [self.plan.results, *self.plan.exclude],
            "maps": self.plan.maps,
            "prefix": None if prefix is None else str(prefix),
            "sweep": trial.sweep,
        }
        path = folder / "spec.json"
        atomic.write_text(path, json.dumps(spec, indent=2) + "\n")
        return path

    def shared_groups(self, trials: List[PlannedTrial]) -> Dict[Path, List[PlannedTrial]]:
        """The trials that share a faulted run, under the folder of that run: two or more kills, power losses or
        sweeps of one save."""
        from chaosckpt.conductor.trial import shared

        groups: Dict[Path, List[PlannedTrial]] = {}
        if not self.plan.share:
            return groups
        for trial in trials:
            save = shared.shareable(scenarios.load(trial.scenario, trial.params), self.plan.nproc)
            if save is not None:
                groups.setdefault(self.folder / "prefixes" / f"save-{save}", []).append(trial)
        return {folder: group for folder, group in groups.items() if len(group) > 1}

    def _prefixes(self, groups: Dict[Path, List[PlannedTrial]]) -> Dict[str, Path]:
        """Make each group's shared faulted run (``jobs`` at a time) unless a resumed suite has it; trial id ->
        the run's folder. A group whose run failed is left out: its trials run their own."""
        from chaosckpt.conductor.trial import shared

        todo = [(folder, group[0]) for folder, group in groups.items() if not shared.ready(folder)]
        running: List[subprocess.Popen] = []
        try:
            while todo or running:
                while todo and len(running) < self.jobs:
                    folder, trial = todo.pop(0)
                    running.append(self._worker(self._spec(trial, folder, prefix=folder)))
                running = [p for p in running if p.poll() is None]
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            _stop(running)
            raise
        return {t.id: folder for folder, group in groups.items() if shared.ready(folder) for t in group}

    def run(self, on_done: Callable[[Finished], None]) -> List[Finished]:
        """Run every pending trial, ``jobs`` at a time; on Ctrl-C stop the workers and re-raise. The shared
        faulted runs' sandboxes go when the trials are done or interrupted, as the trials' own do (a resumed
        suite runs them again)."""
        queue = [t for t in self.pending() if self.selected is None or t.id in self.selected]
        groups = self.shared_groups(queue)
        running: Dict[subprocess.Popen, tuple] = {}
        done: List[Finished] = []
        try:
            prefixes = self._prefixes(groups)
            while queue or running:
                while queue and len(running) < self.jobs:
                    trial = queue.pop(0)
                    running[self._worker(self._spec(trial, prefix=prefixes.get(trial.id)))] = (
                        trial, self.trial_dir(trial) / "worker.log")
                for proc in [p for p in running if p.poll() is not None]:
                    trial, log = running.pop(proc)
                    finished = Finished(trial, self.stored(trial), proc.returncode, log)
                    done.append(finished)
                    on_done(finished)
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            _stop(list(running))
            raise
        finally:
            if not self.keep_sandbox:
                for folder in groups:
                    sandbox.remove(folder / "sandboxes")
        return done

    def _worker(self, spec: Path) -> subprocess.Popen:
        with open(spec.parent / "worker.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "chaosckpt.conductor.suite", str(spec)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=launcher.die_with_parent(signal.SIGINT),  # a killed suite leaves no job behind
                pass_fds=leftovers.held_fds(self.folder),  # the suite stays locked until its last worker is gone
            )


def reference_stop(plan: Plan, random: bool = False) -> Optional[Dict[str, Any]]:
    """The reference's horizon: past the last fault point any planned trial needs; its end when trials are
    placed at random among all its saves."""
    if random:
        return None
    return horizon.reference_stop(plan.horizon, [horizon.condition(scenarios.load(t.scenario, t.params).trigger)
                                                 for t in plan.trials])


def prepare_reference(folder: Path, plan: Plan, parts: Dict[str, object], fresh: bool, random: bool = False) -> bool:
    """Put the suite's reference run into ``folder/reference`` (see ``cache.reference_into``); a resumed
    suite keeps the one it started with. True when it came from a cache."""
    dest = folder / "reference"
    if dest.is_dir():
        why = cache.damage(dest)
        if why is None:
            return True
        print(f"chaosckpt: the suite's reference run is damaged or unfinished ({why}); fetching it again",
              file=sys.stderr)
    return cache.reference_into(dest, plan.reference_key, parts, plan.command, Path(plan.workdir), plan.timeout,
                                [Path(plan.results), *map(Path, plan.exclude)], fresh, reference_stop(plan, random), plan.maps)


def _stop(procs: List[subprocess.Popen]) -> None:
    """Ask interrupted workers to kill their job trees (SIGINT, as a terminal would), then make sure."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_WAIT_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker(spec_path: Path) -> int:
    """One trial, as a suite's worker runs it: ``result.json`` is written atomically when the verdict is in; or,
    where the spec's ``prefix`` is its own folder, the faulted run a group of trials shares."""
    from chaosckpt.conductor.trial import TrialOptions, run_trial, shared

    spec = json.loads(spec_path.read_text())
    scen = scenarios.load(spec["scenario"], spec["params"])
    opts = TrialOptions(
        spec["command"], spec["resume_command"], Path(spec["workdir"]), Path(spec["results_dir"]),
        spec["timeout"], spec["tolerance"], spec["keep_sandbox"], reference=Path(spec["reference"]),
        exclude=[Path(p) for p in spec["exclude"]], horizon=spec.get("horizon", horizon.DEFAULT),
        maps=[Path(p) for p in spec.get("maps", [])],
        prefix=Path(spec["prefix"]) if spec.get("prefix") else None, sweep=spec.get("sweep", False),
    )
    if opts.prefix == opts.results_dir:
        return shared.make_prefix(scen, opts)
    trial = run_trial(scen, opts)
    atomic.write_text(opts.results_dir / "result.json", json.dumps(document([trial]), indent=2) + "\n")
    return int(exit_code([trial.status]))


def _interrupt_once(signum: int, frame: Any) -> None:
    """A worker's SIGINT handler: the first one interrupts the trial; later ones (the terminal's and the
    suite's both arrive on Ctrl-C) are ignored, so they cannot cut short the killing of the job tree."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: List[str]) -> int:
    signals.install()
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return worker(Path(argv[0]))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        where = Path(exc.filename).parent if isinstance(exc.filename, str) else Path(argv[0]).parent
        print(f"chaosckpt: inconclusive: {diskspace.describe(where, what='the trial could not write')}", file=sys.stderr)
        return int(ExitCode.INCONCLUSIVE)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
