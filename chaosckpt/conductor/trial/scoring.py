"""Step 6: the verdict: where the resumed job started, whether it reproduced the trajectory, and, for a
multi-rank job, whether every rank did."""

from __future__ import annotations

from typing import Optional

from chaosckpt.conductor.disk import copies
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import exits
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import ranks, score
from chaosckpt.conductor.trial.aftermath import lost_checkpoint
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted, checkpoint_findings, save_damage
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.resume import Resumed


def score_trial(ctx: Context, reference: RunLog, armed: Armed, run: Faulted, resumed: Resumed) -> bool:
    """Fill the verdict from the three runs; whether they met the scenario's expectation (a resume that exited
    non-zero is an error finding, which fails the trial by itself)."""
    ref = reference.trainer()
    recovered(ctx, ref, armed, run, resumed)
    baseline = _baseline(ctx, ref, run)
    resume_trainer = resumed.log.trainer()
    if ctx.trial.recovered_step is not None and resume_trainer is not None:
        compare(ctx, ref, resume_trainer, ctx.trial.recovered_step)
    ranks_ok = _ranks(ctx, reference, run, resumed)
    _exited(ctx, resumed)
    return _met(ctx, baseline, ranks_ok, resumed)


def recovered(ctx: Context, ref: ProcessLog, armed: Armed, run: Faulted, resumed: Resumed) -> None:
    """Which checkpoint the resumed job started from, the work lost, and what the fault did to the files."""
    trial = ctx.trial
    table = score.digest_table(run.proc, run.log.trainer(), ref)
    result = resumed.result
    crash = score.crash_line(resumed.log, result.stderr)
    rec = score.recovery(resumed.log, result.returncode, crash, run.last_good, table)
    trial.outcome = rec.outcome
    trial.recovered_step = rec.recovered_step
    trial.error = rec.error
    trial.error_path = rel(rec.error_path, armed.work)
    if rec.recovered_step is not None:
        trial.lost_steps = max(0, (run.step or 0) - rec.recovered_step)
    elif rec.outcome == "crashed":
        trial.lost_steps = run.step
    if rec.outcome == "scratch" and ctx.opts.resume_command == ctx.opts.command:
        trial.findings.append(Finding(
            "resume-not-resuming",
            "the resume ran the training command unchanged and the job started from scratch: it may not be "
            "resuming at all; if it loads its checkpoint only when told (a --resume flag, a checkpoint path), "
            "give that with --resume-args, e.g. --resume-args=--resume"))
    trial.findings.extend(save_damage(ctx, run, armed))
    trial.findings.extend(checkpoint_findings(run, resumed.log, rec.error, lambda p: rel(p, armed.work) or p))
    if armed.disk is not None and ctx.scenario.kind.needs_aftermath and run.completed and rec.outcome != "last-good":
        trial.findings.append(lost_checkpoint(ctx, run.completed[-1], run.log.ops(), armed))
    if armed.disk is not None and ctx.scenario.kind.needs_aftermath and run.completed:
        trial.findings.extend(copies.lost(run.completed[-1], run.log.ops(), armed.disk, ctx.scenario.trigger.model,
                                          lambda p: rel(p, armed.work) or p))


def _baseline(ctx: Context, ref: ProcessLog, run: Faulted) -> Optional[int]:
    """The step at which the faulted run already differed from the reference before its fault, if any."""
    baseline = score.baseline_divergence(run.log.trainer() or run.proc, ref, ctx.opts.tolerance)
    if baseline is not None:
        ctx.trial.findings.append(
            Finding(
                "baseline-nondeterministic",
                f"before any fault, the job's step {baseline} already differed from the uninterrupted run: "
                "two runs of the same command do not agree, so a resume cannot be judged against them; "
                "seed every random stream and use deterministic algorithms",
                {"step": baseline},
            )
        )
    return baseline


def compare(ctx: Context, ref: ProcessLog, run: ProcessLog, start: int) -> None:
    """The trajectory of ``run`` from global step ``start`` + 1 against the reference's, into the verdict."""
    trial = ctx.trial
    traj = score.trajectory(ref, run, start, ctx.opts.tolerance)
    trial.reproduced = traj.reproduced
    trial.compared_steps = traj.compared
    trial.first_divergent_step = traj.first_divergent_step
    trial.max_loss_diff = traj.max_loss_diff
    trial.findings.extend(traj.findings)


def _ranks(ctx: Context, reference: RunLog, run: Faulted, resumed: Resumed) -> bool:
    """Per-rank verdicts and data coverage (ranks that disagree fail the trial by their error finding); a resume
    that hung is inconclusive unless the ranks explain it."""
    trial, result = ctx.trial, resumed.result
    ok = ranks.judge(trial, reference, run.log, resumed.log, result.returncode, score.crash_line(resumed.log, result.stderr),
                     ctx.opts.tolerance)
    if result.timed_out:
        if ok and not any(f.kind == "ranks-disagree" for f in trial.findings):
            raise Stop("timeout", f"the resume run did not finish within {ctx.opts.timeout_s:g} s"
                       + (f": {ranks.where(trial.ranks)}" if trial.ranks else "") + f" (see {result.stderr})")
        trial.findings.append(ranks.hung(trial.ranks, ctx.opts.timeout_s))
    return ok


def _exited(ctx: Context, resumed: Resumed) -> None:
    """A resume that exited non-zero after its load (not one that crashed loading, hung, or reached its
    horizon): the exit leads the findings, with the rank, exception, step and the job's function."""
    trial, result = ctx.trial, resumed.result
    if result.timed_out or result.stopped or trial.outcome == "crashed":
        return
    at_exit = exits.after_exit(resumed.log, result.returncode, result.stderr, "the resumed run")
    if at_exit is not None:
        trial.findings.append(at_exit)
        return
    starts = {r["rank"]: r["recovered_step"] for r in trial.ranks} if trial.ranks else {0: trial.recovered_step}
    exited = exits.resume_exit(resumed.log, result.returncode, starts, score.crash_line(resumed.log, result.stderr))
    if exited is not None:
        trial.findings.insert(0, exited)


def _met(ctx: Context, baseline: Optional[int], ranks_ok: bool, resumed: Resumed) -> bool:
    """Whether the resume started where the scenario expects and, where it asks, reproduced the trajectory; a
    trajectory that cannot be judged stops the trial."""
    trial, expect = ctx.trial, ctx.scenario.expect
    recovered_ok = trial.outcome in expect.recovered
    if recovered_ok and baseline is not None and expect.reproduced:
        raise Stop("baseline-nondeterministic", f"the faulted run differed from the uninterrupted one at step "
                   f"{baseline}, before the fault; seed every random stream and use deterministic algorithms")
    if recovered_ok and expect.reproduced and trial.reproduced is None:
        raise Stop("resume-took-no-steps", f"the resumed job exited with status {resumed.result.returncode} without a step")
    return ranks_ok and recovered_ok and bool(trial.reproduced or not expect.reproduced)
