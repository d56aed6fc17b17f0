"""Step 1: the uninterrupted run every other run is judged against, run here or taken from the cache."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Tuple

from chaosckpt import protocol
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
    record = _ran(ctx) if opts.reference is None else _restored(ctx, opts.reference)
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


def _ran(ctx: Context) -> RunRecord:
    """The reference run in a sandbox of its own; with ``cache_reference`` (one machine), the project's cached
    one when it matches the job and goes as far as this trial needs, else this one, kept for the next trial."""
    opts, stop = ctx.opts, run_stop(ctx)
    if not opts.cache_reference or opts.cluster is not None:
        ctx.launch("reference", opts.command, ctx.sandbox("reference"), stop=stop)
        return ctx.runs[-1]
    parts = cache.key_parts(opts.command, opts.resume_command, [str(m) for m in opts.maps],
                            [str(e) for e in opts.exclude[1:]])
    key = cache.key(parts)
    with cache.claimed(key, opts.workdir, opts.exclude, opts.command, stop, opts.fresh_reference) as (store, entry):
        if entry is not None:
            return _restored(ctx, entry)
        box = ctx.sandbox("reference")
        ctx.launch("reference", opts.command, box, stop=stop, env={protocol.ENV_INPUTS: "1"})
        record, dest = ctx.runs[-1], opts.results_dir / "reference"
        if cache.keepable(record):
            cache.write_inputs(dest, box, opts.workdir, [*opts.exclude, dest], opts.command)
            cache.write_entry(dest, record)
        store.keep(key, dest, parts, record)
        return record


def _restored(ctx: Context, source: Path) -> RunRecord:
    """A finished reference run copied from ``source`` (a cache entry, a suite's), refused when it could not
    serve: it wrote outside its sandbox, timed out, or left processes behind."""
    record = cache.restore(source, ctx.opts.results_dir / "reference")
    ctx.runs.append(record)
    confinement.refuse_outside(record.returncode, Path(record.stderr), [source.parent])
    if record.timed_out:
        raise Stop("timeout", f"the reference run did not finish within its time limit (see {record.stderr})")
    if record.survivors:
        raise Stop("survivors", f"after SIGKILL of the reference run, {record.survivors} of its processes were still alive")
    return record


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
