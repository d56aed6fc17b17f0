"""Step 5: the job restarted the way the user restarts it, in the faulted run's sandbox."""

from __future__ import annotations

from dataclasses import dataclass

from chaosckpt.conductor.runs.launcher import RunResult
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.plan import resume_stop


@dataclass
class Resumed:
    result: RunResult
    log: RunLog


def resume(ctx: Context, armed: Armed, reference: RunLog) -> Resumed:
    """The resume run; one that hangs is still judged (a hang is what disagreeing ranks do)."""
    scen = ctx.scenario
    result = ctx.launch("resume", ctx.opts.resume_command, armed.work, fault=scen.kind.resume_fault(),
                        env=scen.kind.resume_env(scen.trigger, reference), stop_on_timeout=False, stop=resume_stop(ctx))
    log = RunLog.read(result.events_dir)
    if log.trainer() is None and result.returncode == 0:
        raise Stop(
            "resume-took-no-steps",
            "the resumed job exited with status 0 without a training step: it found no work left, so where it "
            "resumed from cannot be told; interrupt an earlier save (--param save=N)",
        )
    return Resumed(result, log)
