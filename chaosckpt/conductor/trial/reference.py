"""Step 1: the uninterrupted run every other run is judged against, run here or taken from the cache."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Tuple

from chaosckpt.conductor.disk import cross_device
from chaosckpt.conductor.results.result import Finding, RunRecord
from chaosckpt.conductor.runs import cache, confinement, diskspace, exits, horizon, preflight
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial import async_saves, compare
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.plan import run_stop


class Reference(NamedTuple):
    """The uninterrupted run: its record, its events, and what they say about the job before any fault."""

    record: RunRecord
    log: RunLog
    findings: Tuple[Finding, ...] = ()


def reference(ctx: Context) -> Reference:
    """The reference run, with the finding on how it exited; a run that cannot serve as a reference ends the
    trial (``usable`` tells the rest once its finding is kept)."""
    opts = ctx.opts
    if opts.reference is None:
        ctx.launch("reference", opts.command, ctx.sandbox("reference"), stop=run_stop(ctx))
        record = ctx.runs[-1]
    else:
        record = cache.restore(opts.reference, opts.results_dir / "reference")
        ctx.runs.append(record)
        confinement.refuse_outside(record.returncode, Path(record.stderr), [opts.reference.parent])
        if record.timed_out:
            raise Stop("timeout", f"the reference run did not finish within its time limit (see {record.stderr})")
        if record.survivors:
            raise Stop("survivors", f"after SIGKILL of the reference run, {record.survivors} of its processes were still alive")
    stderr = Path(record.stderr)
    log = RunLog.read(Path(record.events))
    if not log.agent_loaded:
        exit_note = f"; {exits.ended(record.returncode, record.duration_s, stderr)}" if record.returncode else ""
        raise Stop(
            "agent-not-loaded",
            "no event came from the job, so nothing can be scored; the agent needs a Python job that keeps "
            "PYTHONPATH (python -I and -E ignore it)" + exit_note,
        )
    if record.returncode and diskspace.hit_full_disk(stderr, Path(record.events), False):
        raise Stop("disk-full", diskspace.describe(opts.results_dir, what="the reference run could not write"))
    at_exit = exits.after_exit(log, record.returncode, stderr, "the uninterrupted run") if not record.stopped else None
    if at_exit is None and record.returncode != 0 and not record.stopped:
        raise Stop(
            "reference-failed",
            f"the uninterrupted run exited with status {record.returncode}: "
            f"{compare.crash_line(log, stderr) or 'no error output'} (see {stderr})",
        )
    return Reference(record, log, () if at_exit is None else (at_exit,))


def usable(ctx: Context, ref: Reference) -> None:
    """Stop the trial when the reference run took no step, or stopped before the point the fault needs."""
    log, opts = ref.log, ctx.opts
    if log.trainer() is None:
        stale = preflight.stale_checkpoint(log, opts.workdir)
        if stale is not None:
            raise Stop("stale-checkpoint", stale)
        raise Stop("no-steps-recorded", "the uninterrupted run made no step of a torch.optim optimizer")
    if not horizon.covers(log, ref.record.stopped, run_stop(ctx)):
        raise Stop("fault-not-triggered", f"the reference run was stopped at its horizon, step "
                   f"{len(log.trainer().steps)}, before the point this trial's fault needs; run the trial with the "
                   "suite that planned it, or with --horizon end")


def judged(ref: Reference, workdir: Path) -> Reference:
    """The reference with what its events alone say about the job: what its checkpoints hold, its losses, a
    move of a checkpoint that became a copy."""
    trainer = ref.log.trainer()
    found = [*compare.content_findings(trainer), *compare.loss_findings(trainer), *cross_device.became_copy(trainer, workdir),
             *async_saves.unfinished_at_exit(ref.log.saver())]
    return ref._replace(findings=ref.findings + tuple(found))
