"""Step 1: the uninterrupted run every other run is judged against, run here or taken from the cache."""

from __future__ import annotations

from pathlib import Path

from chaosckpt.conductor.runs import cache, confinement, diskspace, exits, horizon, preflight
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial import score
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.plan import run_stop


def reference(ctx: Context) -> RunLog:
    """The reference run's events; a run that cannot serve as a reference ends the trial."""
    opts = ctx.opts
    stop = run_stop(ctx)
    if opts.reference is None:
        ctx.launch("reference", opts.command, ctx.sandbox("reference"), stop=stop)
        record = ctx.trial.runs[-1]
    else:
        record = cache.restore(opts.reference, opts.results_dir / "reference")
        ctx.trial.runs.append(record)
        confinement.refuse_outside(record.returncode, Path(record.stderr), [opts.reference.parent])
        if record.timed_out:
            raise Stop("timeout", f"the reference run did not finish within its time limit (see {record.stderr})")
        if record.survivors:
            raise Stop("survivors", f"after SIGKILL of the reference run, {record.survivors} of its processes were still alive")
    stderr = Path(record.stderr)
    log = RunLog.read(Path(record.events))
    if not log.agent_loaded:
        exit_note = f"; the job exited with status {record.returncode}: {score.tail_line(stderr)}" if record.returncode else ""
        raise Stop(
            "agent-not-loaded",
            "no event came from the job, so nothing can be scored; the agent needs a Python job that keeps "
            "PYTHONPATH (python -I and -E ignore it)" + exit_note,
        )
    if record.returncode and diskspace.hit_full_disk(stderr, Path(record.events), False):
        raise Stop("disk-full", diskspace.describe(opts.results_dir, what="the reference run could not write"))
    at_exit = exits.after_exit(log, record.returncode, stderr, "the uninterrupted run") if not record.stopped else None
    if at_exit is not None:
        ctx.trial.findings.append(at_exit)
    elif record.returncode != 0 and not record.stopped:
        raise Stop(
            "reference-failed",
            f"the uninterrupted run exited with status {record.returncode}: "
            f"{score.crash_line(log, stderr) or 'no error output'} (see {stderr})",
        )
    if log.trainer() is None:
        stale = preflight.stale_checkpoint(log, opts.workdir)
        if stale is not None:
            raise Stop("stale-checkpoint", stale)
        raise Stop("no-steps-recorded", "the uninterrupted run made no step of a torch.optim optimizer")
    if not horizon.covers(log, record.stopped, stop):
        raise Stop("fault-not-triggered", f"the reference run was stopped at its horizon, step "
                   f"{len(log.trainer().steps)}, before the point this trial's fault needs; run the trial with the "
                   "suite that planned it, or with --horizon end")
    return log
