"""The other ending of a trial: the job caught the fault and finished, so its own run is judged, then a
later resume must still load what it saved."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import exits
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import compare
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted
from chaosckpt.conductor.trial.measured import Measured
from chaosckpt.conductor.trial.plan import resume_stop


def survived(ctx: Context, ref: ProcessLog, run: Faulted) -> Measured:
    """The job's own run, which carried on past the fault, against the reference from its first step."""
    own = run.log.trainer() or run.proc
    return Measured(run.fault, run.last_good, outcome="survived").traced(compare.trajectory(ref, own, 0, ctx.opts.tolerance))


def later_resume(ctx: Context, armed: Armed, measured: Measured, table: compare.DigestTable
                 ) -> Tuple[Measured, Optional[int]]:
    """A later resume of what the job saved, and the step it started from (``table``: the states the runs
    saved); one that fails is an error finding, with its error (one killed only in its interpreter's shutdown, after
    its script ended, did not fail: ``crash-at-exit``)."""
    resume = ctx.launch("resume", ctx.opts.resume_command, armed.work, stop=resume_stop(ctx))
    log = RunLog.read(resume.events_dir)
    at_exit = exits.after_exit(log, resume.returncode, resume.stderr, "a later resume")
    if resume.returncode == 0 or resume.stopped or at_exit is not None:
        trainer = log.trainer()
        measured = measured.found(at_exit) if at_exit is not None else measured
        return measured, table.step_of(trainer) if trainer is not None else None
    failed = log.failed_loads()
    error = failed[-1]["error"] if failed else compare.tail_line(resume.stderr)
    error_path = rel(failed[-1].get("path"), armed.work) if failed else None
    return dataclasses.replace(measured, error=error, error_path=error_path).found(
        Finding(
            "no-loadable-checkpoint",
            f"the job carried on past the fault and finished, but a later resume failed: {error}",
            {"returncode": resume.returncode},
        )
    ), None


def survivor_met(ctx: Context, measured: Measured) -> bool:
    """Whether the job's own run met the scenario's expectation (a later resume that failed fails the trial by
    its error finding)."""
    expect = ctx.scenario.expect
    return "survived" in expect.recovered and bool(measured.reproduced or not expect.reproduced)
