"""The sweep ending of a trial: every crash point of the save, its disk state, a load check, the states grouped
into classes a restarted job cannot tell apart, and a full resume of one state of each class."""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from chaosckpt.conductor.disk import crash, sweep
from chaosckpt.conductor.disk.loadcheck import LoadChecker
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import sandbox
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import render, score
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted
from chaosckpt.conductor.trial.plan import resume_stop


def sweep_save(ctx: Context, ref: ProcessLog, armed: Armed, run: Faulted) -> bool:
    """Every crash point of the save into the verdict; whether each class resumed as expected and every state
    loads (a class left untried is a finding of its own, which keeps the trial from passing)."""
    scen, trial, work = ctx.scenario, ctx.trial, armed.work
    target = [s for s in run.proc.saves if s.index == scen.trigger.save][0]
    model = scen.kind.crash_model(scen.trigger)
    earlier = [s for s in run.proc.completed_saves() if s.index < target.index]
    trial.last_good_step = earlier[-1].step if earlier else None
    trial.fault["model"] = model

    def name(path: str) -> str:
        return rel(path, work) or path

    sw = sweep.explore(armed.disk, run.log.ops(), (target.op or 0) + 1, model, name)
    checker = LoadChecker()
    try:
        sweep.classify(sw, sweep.check_states(sw, armed.roots, ctx.sandbox_root / "sweep-states", checker))
    finally:
        checker.close()
    table = score.digest_table(run.proc, run.log.trainer(), ref)
    failed = False
    for state in sw.representatives[: ctx.opts.max_resumes]:
        outcome, ok = _resume_state(ctx, armed, sw.states[state], state, table, run.step)
        failed |= not ok
        for point in sw.points:
            if point.state == state:
                point.outcome, point.resumed = outcome, True
    unloadable = [
        i for i in range(len(sw.states))
        if not any(f.get("loads") for p in sw.points if p.state == i for f in p.files)
    ]
    trial.sweep = [p.to_dict() for p in sw.points]
    trial.findings += _summary(ctx, sw, target.index, unloadable)
    return not failed and not unloadable


def _resume_state(ctx: Context, armed: Armed, entries: List[crash.Entry], state: int, table: score.DigestTable,
                  crash_step: Optional[int]) -> Tuple[str, bool]:
    """Rebuild one disk state in a fresh sandbox and resume the job there: its outcome in words, and whether it
    met the scenario's expectation."""
    work, last_good = armed.work, ctx.trial.last_good_step
    box = sandbox.create(work, ctx.sandbox_root / f"sweep-{state}")
    crash.materialize(entries, armed.roots, lambda p: str(box / os.path.relpath(p, work.resolve())))
    result = ctx.launch(f"resume-state-{state}", ctx.opts.resume_command, box, stop=resume_stop(ctx))
    rec = score.recovery(RunLog.read(result.events_dir), result.returncode, score.tail_line(result.stderr),
                         last_good, table)
    outcome = rec.outcome + (f" (step {rec.recovered_step})" if rec.recovered_step is not None else "")
    if rec.error:
        outcome += f": {render.describe_error(rec.error, rec.error_path is not None)}"
    if rec.recovered_step is not None:  # the most work any resumed state lost
        ctx.trial.lost_steps = max(ctx.trial.lost_steps or 0, (crash_step or 0) - rec.recovered_step)
    return outcome, rec.outcome in ctx.scenario.expect.recovered


def _summary(ctx: Context, sw: sweep.Sweep, save: int, unloadable: List[int]) -> List[Finding]:
    """The sweep's summary, and the classes of crash state no resume tried, named by their first crash point."""
    classes = len(sw.representatives)
    left = sweep.untried(sw.points)
    found = [Finding(
        "sweep",
        f"{len(sw.points)} crash points in save {save}, {len(sw.states)} distinct disk states in {classes} "
        f"class{'' if classes == 1 else 'es'} a restarted job can tell apart, {classes - len(left)} resumed; "
        f"{len(unloadable)} state(s) hold no loadable file",
        {"points": len(sw.points), "states": len(sw.states), "classes": classes,
         "resumed_classes": classes - len(left), "unloadable_states": unloadable},
    )]
    if left:
        firsts = [next(p for p in sw.points if p.state_class == c) for c in left]
        listed = "; ".join(f"class {p.state_class}, first after op {p.op} ({p.operation})" for p in firsts)
        found.append(Finding(
            "sweep-untried",
            f"{len(left)} of {classes} classes of crash state were never resumed ({listed}): their resume could "
            f"still fail; raise --max-resumes to {classes} (it is {ctx.opts.max_resumes})",
            {"classes": left, "ops": [p.op for p in firsts], "max_resumes": ctx.opts.max_resumes},
        ))
    return found
