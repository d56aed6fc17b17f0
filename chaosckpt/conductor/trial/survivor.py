"""The other ending of a trial: the job caught the fault and finished, so its own run is judged, then a
later resume must still load what it saved."""

from __future__ import annotations

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import score
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.plan import resume_stop
from chaosckpt.conductor.trial.scoring import compare


def judge_survivor(ctx: Context, ref: ProcessLog, faulted: ProcessLog, armed: Armed) -> bool:
    """Whether the job's own run met the scenario's expectation; a later resume that fails is an error finding."""
    trial = ctx.trial
    trial.outcome = "survived"
    compare(ctx, ref, faulted, 0)
    resume = ctx.launch("resume", ctx.opts.resume_command, armed.work, stop=resume_stop(ctx))
    resumable = resume.returncode == 0 or resume.stopped
    if not resumable:
        failed = RunLog.read(resume.events_dir).failed_loads()
        error = failed[-1]["error"] if failed else score.tail_line(resume.stderr)
        trial.error = error
        trial.error_path = rel(failed[-1].get("path"), armed.work) if failed else None
        trial.findings.append(
            Finding(
                "no-loadable-checkpoint",
                f"the job carried on past the fault and finished, but a later resume failed: {error}",
                {"returncode": resume.returncode},
            )
        )
    expect = ctx.scenario.expect
    return "survived" in expect.recovered and bool(trial.reproduced or not expect.reproduced)
