"""Step 6: the verdict's measures: where the resumed job started, whether it reproduced the trajectory, and, for a
multi-rank job, whether every rank did."""

from __future__ import annotations

import dataclasses
from typing import List, NamedTuple, Optional, Tuple

from chaosckpt.conductor.disk import copies
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import exits
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import compare, older_choice, provenance, ranks, restore_point
from chaosckpt.conductor.trial.aftermath import lost_checkpoint
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel, rel_text
from chaosckpt.conductor.trial.faulted import Faulted, checkpoint_findings, save_damage
from chaosckpt.conductor.trial.measured import Measured
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.resume import Resumed
from chaosckpt.conductor.trial.torn_copy import torn_copies


class Scored(NamedTuple):
    """What scoring measured, and what ``met`` needs to tell whether it met the scenario's expectation."""

    measured: Measured
    baseline: Optional[int]
    """The step at which the faulted run already differed from the reference before its fault, if any."""
    ranks_ok: bool
    """False when the data coverage of the ranks fails the trial whatever rank 0 did."""
    resumed: Resumed
    stop: Optional[Stop] = None
    """A resume that hung with nothing to explain it: the trial stops once what it measured is kept."""


def score_trial(ctx: Context, reference: RunLog, armed: Armed, run: Faulted, resumed: Resumed) -> Scored:
    """The verdict's fields from the three runs (a resume that exited non-zero is an error finding, which fails
    the trial by itself)."""
    ref = reference.trainer()
    resumed, before_load = _from_restore(reference, run, resumed)
    measured = recovered(ctx, ref, armed, run, resumed)
    if before_load:
        measured = measured.found(restore_point.before_load(before_load))
    baseline = compare.baseline_divergence(run.log.trainer() or run.proc, ref, ctx.opts.tolerance)
    if baseline is not None:
        measured = measured.found(_nondeterministic(baseline))
    resume_trainer = resumed.log.trainer()
    if measured.recovered_step is not None and resume_trainer is not None:
        measured = measured.traced(compare.trajectory(ref, resume_trainer, measured.recovered_step, ctx.opts.tolerance))
    result = resumed.result
    measured, ok = ranks.judge(measured, reference, run.log, resumed.log, result.returncode,
                               compare.crash_line(resumed.log, result.stderr), ctx.opts.tolerance)
    stop = None
    if result.timed_out:
        if ok and not any(f.kind == "ranks-disagree" for f in measured.findings):
            stop = Stop("timeout", f"the resume run did not finish within {ctx.opts.timeout_s:g} s"
                        + (f": {ranks.where(list(measured.ranks))}" if measured.ranks else "") + f" (see {result.stderr})")
        else:
            measured = measured.found(ranks.hung(list(measured.ranks), ctx.opts.timeout_s))
    return Scored(_exited(measured, resumed), baseline, ok, resumed, stop)


def _from_restore(reference: RunLog, run: Faulted, resumed: Resumed) -> Tuple[Resumed, int]:
    """The resume as from its restore point (``restore_point``), and the steps its trainer took before it."""
    table = compare.digest_table(run.proc, *run.log.processes, *reference.processes)
    log, before = restore_point.after_restore(resumed.log, table)
    return (dataclasses.replace(resumed, log=log), before) if before else (resumed, 0)


def recovered(ctx: Context, ref: ProcessLog, armed: Armed, run: Faulted, resumed: Resumed) -> Measured:
    """Which checkpoint the resumed job started from, the work lost, and what the fault did to the files."""
    table = compare.digest_table(run.proc, run.log.trainer(), ref)
    result = resumed.result
    crash = compare.crash_line(resumed.log, result.stderr)
    rec = compare.recovery(resumed.log, result.returncode, crash, run.last_good, table)
    taken = provenance.weights_taken(resumed.log.trainer(), armed.shown) \
        if rec.outcome == "unknown-state" else []
    loaded = older_choice.step_loaded(run, resumed.log) \
        if any(f.kind == "resumed-other-weights" for f in taken) else None
    if loaded is not None:
        rec = compare.placed(loaded, run.last_good)
    lost = None
    if rec.recovered_step is not None:
        lost = max(0, (run.step or 0) - rec.recovered_step)
    elif rec.outcome == "crashed":
        lost = run.step
    measured = Measured(run.fault, run.last_good, outcome=rec.outcome, recovered_step=rec.recovered_step,
                        error=rel_text(rec.error, armed.work), error_path=rel(rec.error_path, armed.work),
                        lost_steps=lost)
    older = older_choice.passed_over(run, resumed.log, rec.recovered_step, armed.work) \
        if rec.outcome == "older" and rec.recovered_step is not None else []
    return measured.found(*older, *_damage(ctx, armed, run, resumed, measured), *taken)


def _damage(ctx: Context, armed: Armed, run: Faulted, resumed: Resumed, measured: Measured) -> List[Finding]:
    """What the fault did to the files the resume found (the one it tripped over: its crash's, or the last it could
    not load before going on), and a resume that did not resume (while a complete checkpoint was left: one the job
    deleted explains a start from scratch, and one it tried and could not load shows it resuming)."""
    found = []
    left = [s for s in run.completed if s not in run.gone]
    # a resume that could not load the struck file and went on from an older one, or from scratch, tripped over it
    failed = [rel(e["path"], armed.work) for e in resumed.log.failed_loads() if isinstance(e.get("path"), str)]
    if measured.outcome == "scratch" and left and not failed and ctx.opts.resume_command == ctx.opts.command:
        found.append(Finding(
            "resume-not-resuming",
            "the resume ran the training command unchanged and the job started from scratch: it may not be "
            "resuming at all; if it loads its checkpoint only when told (a --resume flag, a checkpoint path), "
            "give that with --resume-args, e.g. --resume-args=--resume"))
    tripped = measured.error_path or (failed[-1] if failed else None)
    found += save_damage(ctx, run, armed, measured.outcome, tripped)
    found += checkpoint_findings(run, resumed.log, measured.error, armed.shown)
    found += torn_copies(run.fault, run.proc, resumed.log, armed.work, measured.error_path, measured.recovered_step)
    power_lost = armed.disk is not None and ctx.scenario.kind.needs_aftermath and run.completed
    if power_lost and measured.outcome != "last-good":
        lost = lost_checkpoint(ctx, run.completed[-1], run.log.ops(), armed, measured.error_path)
        found += [lost] if lost is not None else []
    if power_lost:
        found += copies.lost(run.completed[-1], run.log.ops(), armed.disk, ctx.scenario.trigger.model,
                             armed.shown)
    return found


def _nondeterministic(baseline: int) -> Finding:
    return Finding(
        "baseline-nondeterministic",
        f"before any fault, the job's step {baseline} already differed from the uninterrupted run: "
        "two runs of the same command do not agree, so a resume cannot be judged against them; "
        "seed every random stream and use deterministic algorithms",
        {"step": baseline},
    )


def _exited(measured: Measured, resumed: Resumed) -> Measured:
    """A resume that exited non-zero after its load (not one that crashed loading, hung, or reached its
    horizon): the exit leads the findings, with the rank, exception, step and the job's function."""
    result = resumed.result
    if result.timed_out or result.stopped or measured.outcome == "crashed":
        return measured
    at_exit = exits.after_exit(resumed.log, result.returncode, result.stderr, "the resumed run")
    if at_exit is not None:
        return measured.found(at_exit)
    starts = {r["rank"]: r["recovered_step"] for r in measured.ranks} if measured.ranks else {0: measured.recovered_step}
    exited = exits.resume_exit(resumed.log, result.returncode, starts, compare.crash_line(resumed.log, result.stderr))
    return measured if exited is None else dataclasses.replace(measured, lead=exited)


def met(ctx: Context, scored: Scored) -> bool:
    """Whether the resume started where the scenario expects and, where it asks, reproduced the trajectory; a
    trajectory that cannot be judged, or a hang nothing explains, stops the trial."""
    if scored.stop is not None:
        raise scored.stop
    measured, expect = scored.measured, ctx.scenario.expect
    recovered_ok = measured.outcome in expect.recovered
    if recovered_ok and scored.baseline is not None and expect.reproduced:
        raise Stop("baseline-nondeterministic", f"the faulted run differed from the uninterrupted one at step "
                   f"{scored.baseline}, before the fault; seed every random stream and use deterministic algorithms")
    if recovered_ok and expect.reproduced and measured.reproduced is None:
        raise Stop("resume-took-no-steps", f"the resumed job exited with status {scored.resumed.result.returncode} without a step")
    return scored.ranks_ok and recovered_ok and bool(measured.reproduced or not expect.reproduced)
