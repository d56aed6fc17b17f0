"""A suite: every configured scenario against one job, one shared reference run, trials in parallel workers.

A suite folder holds everything needed to continue it or to render its reports:

    suite.json         the plan: commands, trials and their fault points, state (rewritten atomically)
    reference/         the reference run every trial reuses (from the cache, or run here)
    trials/<id>/       spec.json (what its worker runs), result.json (its verdict, written atomically),
                       worker.log, and the trial's own runs
    prefixes/save-<k>/ the faulted run shared by the trials that fault save k (``trial.shared``): its journal,
                       its halted sandbox (removed when the suite's trials are done or interrupted) and prefix.json
    result.json        all verdicts in one document, as ``chaosckpt run --json`` prints them

Each trial runs in a worker process (``python -m chaosckpt.conductor.suite.worker SPEC``), so that Ctrl-C
reaches every worker at once and each kills its own job tree: on this machine, where a worker dies with the
suite, or as a Slurm job (``executors``). A trial is done when its ``result.json`` exists; ``--resume`` runs
the others, and waits for a Slurm job of one that is still queued or running.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set

from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.suite_plan import Plan, PlannedTrial, load_plan, stored_trial, trial_dir
from chaosckpt.conductor.runs import cache, horizon, launcher, sandbox
from chaosckpt.conductor.suite import executors
from chaosckpt.conductor.runs.runlog import RunLog

STOP_WAIT_S = 30.0
"""How long an interrupted worker gets to kill its job tree before it is killed itself."""
POLL_S = 0.05



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
    """The trigger keys the scenario's fault takes."""
    return scenarios.load(scenario_name).kind.trigger_keys


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

    def __init__(self, folder: Path, plan: Plan, jobs: Optional[int] = None, keep_sandbox: bool = False) -> None:
        self.folder = folder
        self.plan = plan
        self.executor = executors.executor(plan.executor, folder, plan.sbatch)
        self.jobs = jobs or (len(plan.trials) if plan.executor == "slurm" else 1)
        """Workers at once: 1 on this machine unless told; every trial with Slurm, whose queue decides."""
        self.keep_sandbox = keep_sandbox
        self.selected: Optional[Set[str]] = None
        """With ``-k`` on a resumed suite: the ids of the pending trials to run now; None runs them all."""

    @classmethod
    def open(cls, folder: Path, **kwargs: Any) -> "Suite":
        data = load_plan(folder)
        if data is None:
            raise UsageError(f"suite {folder} has no readable suite.json any more; run chaosckpt suite without --resume")
        return cls(folder, Plan.from_dict(data), **kwargs)

    def save_plan(self) -> None:
        atomic.write_text(self.folder / "suite.json", json.dumps(self.plan.to_dict(), indent=2) + "\n")

    def pending(self) -> List[PlannedTrial]:
        return [t for t in self.plan.trials if not t.skipped and stored_trial(self.folder, t) is None]

    def _spec(self, trial: PlannedTrial, folder: Optional[Path] = None, prefix: Optional[Path] = None) -> Path:
        """The worker's spec in a fresh ``folder`` (the trial's); with ``prefix``, the shared faulted run it rebuilds
        its fault from, or the folder where that run is made when ``folder`` is ``prefix``."""
        folder = folder or trial_dir(self.folder, trial)
        if folder.exists():
            shutil.rmtree(folder)  # what an interrupted worker left: redo it from the start
        folder.mkdir(parents=True)
        spec = {
            "scenario": trial.scenario,
            "params": trial.params,
            "options": {**self.plan.options, "results_dir": str(folder), "keep_sandbox": self.keep_sandbox or folder == prefix,
                        "reference": str(self.folder / "reference"), "prefix": None if prefix is None else str(prefix),
                        "sweep": trial.sweep},
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
        running: List[Any] = []
        try:
            while todo or running:
                while todo and len(running) < self.jobs:
                    folder, trial = todo.pop(0)
                    running.append(self.executor.adopt(folder) or
                                   self.executor.start(self._spec(trial, folder, prefix=folder)))
                running = [p for p in running if p.poll() is None]
                time.sleep(POLL_S)
        except BaseException:  # Ctrl-C, or a trial Slurm would not take: no worker is left behind
            _stop(running)
            raise
        return {t.id: folder for folder, group in groups.items() if shared.ready(folder) for t in group}

    def run(self, on_done: Callable[[Finished], None],
            on_start: Callable[[PlannedTrial], None] = lambda trial: None) -> List[Finished]:
        """Run every pending trial, ``jobs`` at a time, telling ``on_start`` and ``on_done`` of each; on Ctrl-C stop
        the workers and re-raise. The shared faulted runs' sandboxes go when the trials are done or interrupted, as the trials' own do (a resumed
        suite runs them again)."""
        queue = [t for t in self.pending() if self.selected is None or t.id in self.selected]
        groups = self.shared_groups(queue)
        running: Dict[Any, tuple] = {}
        done: List[Finished] = []
        try:
            prefixes = self._prefixes(groups)
            while queue or running:
                while queue and len(running) < self.jobs:
                    trial = queue.pop(0)
                    on_start(trial)
                    worker = self.executor.adopt(trial_dir(self.folder, trial)) or self.executor.start(
                        self._spec(trial, prefix=prefixes.get(trial.id)))
                    running[worker] = (trial, trial_dir(self.folder, trial) / "worker.log")
                for proc in [p for p in running if p.poll() is not None]:
                    trial, log = running.pop(proc)
                    finished = Finished(trial, stored_trial(self.folder, trial), proc.returncode, log)
                    done.append(finished)
                    on_done(finished)
                time.sleep(POLL_S)
        except BaseException:
            _stop(list(running))
            raise
        finally:
            if not self.keep_sandbox:
                for folder in groups:
                    sandbox.remove(folder / "sandboxes")
        return done


def reference_stop(plan: Plan, random: bool = False) -> Optional[Dict[str, Any]]:
    """The reference's horizon: past the last fault point any planned trial needs; its end when trials are
    placed at random among all its saves."""
    if random:
        return None
    return horizon.reference_stop(plan.horizon, [horizon.condition(scenarios.load(t.scenario, t.params).trigger)
                                                 for t in plan.trials if not t.skipped])


REFERENCE_JOB = "reference-job"
"""In a suite's folder sent to Slurm: the reference run's worker job (``spec.json``, ``worker.log``, ``slurm.json``)
and, once it is done, ``done.json`` saying whether it came from the cache."""


def prepare_reference(folder: Path, plan: Plan, parts: Dict[str, object], fresh: bool, random: bool = False) -> bool:
    """Put the suite's reference run into ``folder/reference`` (see ``cache.reference_into``): here, or as a Slurm
    job with the trials' resources when they run on Slurm (a login node may have none of the GPUs the job needs); a
    resumed suite keeps the one it started with. True when it came from a cache."""
    dest = folder / "reference"
    if dest.is_dir():
        why = cache.damage(dest)
        if why is None:
            return True
        print(f"chaosckpt: the suite's reference run is damaged or unfinished ({why}); fetching it again",
              file=sys.stderr)
    spec = {"dest": str(dest), "key": plan.reference_key, "parts": parts, "command": plan.command,
            "workdir": plan.workdir, "timeout": plan.timeout, "exclude": [plan.results, *plan.exclude], "fresh": fresh,
            "stop": reference_stop(plan, random), "maps": plan.maps}
    if plan.executor == "slurm":
        return _reference_job(folder, spec, executors.executor(plan.executor, folder, plan.sbatch))
    return reference_from_spec(spec)


def reference_from_spec(spec: Dict[str, Any]) -> bool:
    """The reference run ``prepare_reference`` asks for, made where this process runs; True when it came from the
    cache."""
    return cache.reference_into(Path(spec["dest"]), spec["key"], spec["parts"], spec["command"], Path(spec["workdir"]),
                                spec["timeout"], [Path(p) for p in spec["exclude"]], spec["fresh"], spec["stop"],
                                spec["maps"])


def _reference_job(folder: Path, spec: Dict[str, Any], executor: Any) -> bool:
    """The reference run as a worker job of ``executor`` (a resumed suite waits for the one still queued or
    running); a usage error naming the job when it ended without one."""
    job_dir = folder / REFERENCE_JOB
    job = executor.adopt(job_dir)
    if job is None:
        shutil.rmtree(job_dir, ignore_errors=True)
        job_dir.mkdir()
        atomic.write_text(job_dir / "spec.json", json.dumps({"reference": spec}, indent=2) + "\n")
        job = executor.start(job_dir / "spec.json")
    try:
        while job.poll() is None:
            time.sleep(POLL_S)
    except BaseException:  # Ctrl-C: the job is cancelled as a trial's would be
        _stop([job])
        raise
    why = cache.damage(Path(spec["dest"])) if (job_dir / "done.json").is_file() else "it wrote no reference"
    if job.returncode != 0 or why is not None:
        how = executors.ended(job.job_id, job.state, job.returncode) if hasattr(job, "job_id") else \
            f"its worker ended with exit status {job.returncode}"
        raise UsageError(f"the reference run's job ended without a reference: {how} ({why}; see "
                         f"{job_dir / 'worker.log'})")
    return bool(json.loads((job_dir / "done.json").read_text())["cached"])


def _stop(procs: List[Any]) -> None:
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
            launcher.reap(proc)
