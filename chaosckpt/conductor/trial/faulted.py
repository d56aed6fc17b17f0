"""Step 3: the faulted run, stopped at its fault, and where the fault caught the job."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import List, Optional

from chaosckpt.conductor.disk import checkpoints
from chaosckpt.conductor.results.result import FaultRecord, Finding, Outcome
from chaosckpt.conductor.runs import exits
from chaosckpt.conductor.runs.launcher import RunResult
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save
from chaosckpt.conductor.trial import compare, emergency_saves
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.fault_files import file_states, files_after_fault
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.plan import run_stop


@dataclass
class Faulted:
    """The faulted run and the point of its fault."""

    result: Optional[RunResult]
    """None when the run was rebuilt from a suite's shared one (``shared``): a kill that never carried on."""
    log: RunLog
    proc: ProcessLog
    """The process the fault fired in."""
    step: Optional[int]
    """The global step that process had reached when the fault fired."""
    fault: FaultRecord
    """Where the fault struck, as the verdict reports it."""
    completed: list
    """The checkpoints that process completed before the fault."""
    gone: list = dataclasses.field(default_factory=list)
    """Those of them the job had deleted when the fault hit. The newest stays the last good: a job that deletes
    it before the next checkpoint is complete loses it to the fault (``rotation-before-complete``)."""
    exit_crash: Optional[Finding] = None
    """``crash-at-exit``: every process ended its script, then one was killed in the interpreter's shutdown (a
    daemon saver thread still inside a native save when the interpreter exits: SIGABRT)."""

    @property
    def last_good(self) -> Optional[int]:
        return self.completed[-1].step if self.completed else None

    @property
    def carried_on(self) -> bool:
        """The job caught the fault and went on: to its end (its script's end, whatever its shutdown then did), or
        to its horizon."""
        r = self.result
        return r is not None and not r.fault_fired and (r.returncode == 0 or r.stopped or self.exit_crash is not None)


def faulted(ctx: Context, armed: Armed, reference: RunLog) -> Faulted:
    """Run the job with the fault armed: where it fired and what it left on disk."""
    fault = armed.fault
    kind = ctx.scenario.kind
    result = ctx.launch("faulted", ctx.opts.command, armed.work, fault, hold=kind.hold(reference, fault),
                        stop=run_stop(ctx), cut=armed.cut, preempt=kind.preempts(ctx.scenario.trigger))
    if armed.disk is not None:  # where the agent kept the data the run's operations destroyed
        armed.disk.keeps = str(result.events_dir / "keep")
    log = RunLog.read(result.events_dir)
    if not log.agent_loaded:
        raise Stop("agent-not-loaded", "no event came from the faulted run: "
                   + exits.ended(result.returncode, result.duration_s, result.stderr))
    proc, step = compare.fault_point(log)
    if proc is None:
        ended = "reached its horizon" if result.stopped else f"finished (status {result.returncode})"
        raise Stop(
            "fault-not-triggered",
            f"the job {ended} without reaching the fault's point in save "
            f"{fault['save']}; its saves differ from the uninterrupted run's",
        )
    return caught(ctx, armed, result, log, proc, step)


def caught(ctx: Context, armed: Armed, result: Optional[RunResult], log: RunLog, proc: ProcessLog,
           step: Optional[int]) -> Faulted:
    """Where the fault fired in ``proc`` and what the job had saved by then."""
    event = proc.fault
    sent = result.preempted if result is not None else None
    # a preempted job may go on after the signal: every checkpoint it finished by its end counts
    completed = checkpoints.saved(proc, before=None if sent is not None else event["ts"])
    fault: FaultRecord = {
        "kind": event["fault"],
        "save": event["save"],
        "step": step,
        **{k: event[k] for k in ("write", "bytes", "op", "free_bytes", "thread", "steps_in_flight", "held") if k in event},
        "path": rel(event.get("path"), armed.work),
        "files": files_after_fault(ctx, proc, armed.work),
    }
    if "write" in event and (armed.fault.get("file") or armed.fault.get("file_index")):
        fault["in_file"] = True
    if sent is not None:
        fault["preemption"] = emergency_saves.record(sent, log, step, result.returncode if result is not None else None)
    if proc.background_error is not None:
        fault["noticed"] = proc.background_error.get("fate") == "observed"
    if not ctx.scenario.kind.needs_aftermath and armed.cut is None:  # a power loss rebuilds the files next
        fault["file_states"] = file_states(ctx, proc, armed.work, armed.file_bytes)
    at_exit = exits.after_exit(log, result.returncode, result.stderr, "the faulted run") \
        if result is not None and not result.fault_fired else None
    return Faulted(result, log, proc, step, fault, completed, checkpoints.gone(completed), at_exit)


def save_damage(ctx: Context, run: Faulted, armed: Armed, outcome: Outcome, error_path: Optional[str]) -> List[Finding]:
    """What the interrupted save did to the file the resume tripped over (``error_path``; ``outcome``: where
    the resume started): a torn file, an overwritten last good checkpoint."""
    proc, work = run.proc, armed.work
    broken = [s for s in proc.saves if s.index == proc.fault["save"]]
    # a preemption's save was cut only where the signal ended the job inside it; else it went on to its end
    cut = run.result is None or run.result.preempted is None or any(not s.ok for s in broken)
    mid_save = ("write" in proc.fault and cut) or proc.fault["fault"] == "disk-full"
    struck = proc.fault.get("path") or (_struck(broken[0]) if broken else None)
    if not mid_save or not broken or struck is None or outcome == "last-good":
        return []
    path = rel(struck, work)
    if error_path != path and (error_path is not None or outcome != "crashed"):
        return []  # the resume tripped over another file (a crash outside torch.load names none: this one)
    findings = []
    left = run.fault["files"].get(path)
    full = armed.file_bytes.get(path, armed.full_bytes)
    if left is not None and left < full and os.path.isfile(ctx.host_path(struck, work)):
        findings.append(
            Finding(
                "torn-checkpoint",
                f"the interrupted save {broken[0].index} left {path} with {left} of its {full} bytes",
                {"path": path, "bytes": left, "full_bytes": full},
            )
        )
    earlier = [s for s in run.completed if struck in s.paths() and not s.moved_away(struck)]
    if earlier:
        findings.append(
            Finding(
                "in-place-save",
                f"save {broken[0].index} wrote straight over {path}, which held the checkpoint of step "
                f"{earlier[-1].step}: the old checkpoint was gone as soon as the save began. Save to a temporary "
                "name in the same directory, flush and fsync it, then os.replace() it over the old name",
                {"path": path, "overwritten_step": earlier[-1].step},
            )
        )
    return findings


def _struck(save: Save) -> Optional[str]:
    """The file the fault struck in ``save`` when its event names none: the first of the save's files whose write
    failed (a disk-full fault fires as the save begins, before any file is open), else the save's own path."""
    failed = next((f["path"] for f in save.files if not f.get("ok") and f.get("path")), None)
    return failed or save.path


def checkpoint_findings(run: Faulted, resume: RunLog, error: Optional[str], name) -> List[Finding]:
    """What the job's rotation and its resume did with complete and incomplete checkpoints."""
    interrupted = checkpoints.interrupted_save(run.proc)
    found = [checkpoints.rotation_finding(run.completed, run.gone, interrupted, name),
             checkpoints.chose_incomplete(interrupted, run.completed, run.gone, resume, error, name,
                                          run.proc.fault.get("writing", []))]
    return [f for f in found if f is not None]
