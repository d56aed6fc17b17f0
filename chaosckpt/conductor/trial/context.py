"""What every step of a trial shares: the scenario, the options, and the record of every run it started."""

from __future__ import annotations

import importlib
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from chaosckpt.conductor.nodes import conduct
from chaosckpt.conductor.results.result import RunRecord
from chaosckpt.conductor.runs import confinement, diskspace, launcher, sandbox
from chaosckpt.conductor.runs.launcher import RunResult, RunSpec
from chaosckpt.conductor.runs.signalling import Preemption
from chaosckpt.conductor.scenario import Scenario
from chaosckpt.conductor.trial.options import Stop, TrialOptions


@dataclass
class Context:
    scenario: Scenario
    opts: TrialOptions
    runs: List[RunRecord] = field(default_factory=list)
    """Every process tree of the trial, in the order it started them (or took one from a cache or a suite)."""
    maps: List[str] = field(default_factory=list)
    """Every folder outside the working directory overlaid for the job's writes (see ``sandbox.maps``)."""

    def __post_init__(self) -> None:
        self.maps = sandbox.maps(self.opts.workdir, self.opts.maps, self.opts.results_dir)

    def host_path(self, path: str, work: Path) -> str:
        """Where chaosckpt finds the file the job wrote at ``path`` (see ``confinement.host_path``)."""
        return confinement.host_path(path, work, self.maps)

    @property
    def sandbox_root(self) -> Path:
        return self.opts.results_dir / "sandboxes"

    def sandbox(self, name: str) -> Path:
        """A fresh private copy of the working directory for one run."""
        return sandbox.create(self.opts.workdir, self.sandbox_root / name,
                              exclude=[self.opts.results_dir, *self.opts.exclude])

    def launch(self, name: str, argv: List[str], cwd: Path, fault: Optional[dict] = None,
               env: Optional[Dict[str, str]] = None, hold: Optional[Callable[[Path], bool]] = None,
               stop_on_timeout: bool = True, stop: Optional[dict] = None,
               cut: Optional[conduct.NodeFault] = None, preempt: Optional[Preemption] = None) -> RunResult:
        """Run one process tree of the trial, to its end or its horizon ``stop``, and record it; a timeout or
        a survivor of the kill ends the trial."""
        _import_torch_meanwhile()
        progress = self.opts.progress
        watch = None if progress is None else lambda events, elapsed: progress(name, events, elapsed, stop, fault)
        spec = RunSpec(name, argv, cwd, self.opts.results_dir / name, self.opts.timeout_s, fault, env or {}, hold,
                       stop, watch, self.maps, preempt=preempt)
        try:
            cluster = self.opts.cluster
            result = launcher.launch(spec) if cluster is None else conduct.launch(spec, cluster, cut)
        finally:
            if progress is not None:
                progress.done()
        confinement.refuse_outside(result.returncode, result.stderr, [cwd, spec.log_dir, confinement.layers(cwd)],
                                   result.events_dir)
        self.runs.append(
            RunRecord(
                name=name,
                command=argv,
                returncode=result.returncode,
                duration_s=round(result.duration_s, 3),
                timed_out=result.timed_out,
                fault_fired=result.fault_fired,
                survivors=len(result.survivors),
                stdout=str(result.stdout),
                stderr=str(result.stderr),
                events=str(result.events_dir),
                stopped=result.stopped,
                stop=stop,
                confinement=result.confinement,
            )
        )
        if isinstance(result, conduct.NodesResult) and result.lost:
            raise Stop("node-lost", conduct.lost_detail(result, self.opts.cluster))
        if (result.returncode or result.log_error) and diskspace.hit_full_disk(
                result.stderr, result.events_dir, self.scenario.kind.fills_disk, result.log_error):
            raise Stop("disk-full", diskspace.describe(self.opts.results_dir, what=f"the {name} run could not write"))
        if result.timed_out and stop_on_timeout:
            raise Stop("timeout", f"the {name} run did not finish within {self.opts.timeout_s:g} s (see {result.stderr})")
        if result.survivors:
            raise Stop("survivors", f"after SIGKILL of the {name} run, pids {result.survivors} were still alive")
        return result


_IMPORTER = "chaosckpt-import-torch"


def _import_torch_meanwhile() -> None:
    """Import torch on a thread once the job's first run has started, while chaosckpt only waits for it: reading
    the checkpoints after the fault needs torch, and its import (1 to 5 s) would otherwise follow the faulted run."""
    if "torch" not in sys.modules and not any(t.name == _IMPORTER for t in threading.enumerate()):
        threading.Thread(target=importlib.import_module, args=("torch",), name=_IMPORTER, daemon=True).start()


def rel(path: Optional[str], work: Path) -> Optional[str]:
    """``path`` relative to the sandbox ``work``, as the user knows it; unchanged when outside it."""
    if path is None:
        return None
    try:
        return str(Path(path).relative_to(work.resolve()))
    except ValueError:
        return path


def rel_text(text: Optional[str], work: Path) -> Optional[str]:
    """``text`` (an error the job printed) with every path under the sandbox ``work`` made relative to it, as
    ``rel`` shows a path: the job's own messages name the sandbox's absolute paths, which the user never sees."""
    if text is None:
        return None
    for root in dict.fromkeys((str(work.resolve()), str(work))):
        text = text.replace(root + "/", "")
    return text
