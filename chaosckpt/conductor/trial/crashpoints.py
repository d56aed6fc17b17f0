"""The sweep ending of a trial: every crash point of the save, its disk state, a load check, and full
resumes of the first few distinct states."""

from __future__ import annotations

import os

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
    """Every crash point of the save into the verdict; whether each resumed as expected and every state loads."""
    scen, trial, work, roots = ctx.scenario, ctx.trial, armed.work, armed.roots
    proc = run.proc
    target = [s for s in proc.saves if s.index == scen.trigger.save][0]
    model = scen.kind.crash_model(scen.trigger)
    earlier = [s for s in proc.completed_saves() if s.index < target.index]
    last_good = earlier[-1].step if earlier else None
    trial.last_good_step = last_good
    trial.fault["model"] = model

    def name(path: str) -> str:
        return rel(path, work) or path

    sw = sweep.explore(armed.disk, run.log.ops(), (target.op or 0) + 1, model, name)
    checker = LoadChecker()
    try:
        sweep.check_states(sw, roots, ctx.sandbox_root / "sweep-states", checker)
    finally:
        checker.close()
    table = score.digest_table(proc, run.log.trainer(), ref)
    failed = False
    for index, entries in enumerate(sw.states[: ctx.opts.max_resumes]):
        box = sandbox.create(work, ctx.sandbox_root / f"sweep-{index}")
        crash.materialize(entries, roots, lambda p, box=box: str(box / os.path.relpath(p, work.resolve())))
        result = ctx.launch(f"resume-state-{index}", ctx.opts.resume_command, box, stop=resume_stop(ctx))
        rec = score.recovery(RunLog.read(result.events_dir), result.returncode, score.tail_line(result.stderr),
                             last_good, table)
        outcome = rec.outcome + (f" (step {rec.recovered_step})" if rec.recovered_step is not None else "")
        if rec.error:
            outcome += f": {render.describe_error(rec.error, rec.error_path is not None)}"
        if rec.recovered_step is not None:  # the most work any resumed state lost
            trial.lost_steps = max(trial.lost_steps or 0, (run.step or 0) - rec.recovered_step)
        failed |= rec.outcome not in scen.expect.recovered
        for point in sw.points:
            if point.state == index:
                point.outcome = outcome
    unloadable = [
        i for i in range(len(sw.states))
        if not any(f.get("loads") for p in sw.points if p.state == i for f in p.files)
    ]
    trial.sweep = [p.to_dict() for p in sw.points]
    trial.findings.append(
        Finding(
            "sweep",
            f"{len(sw.points)} crash points in save {target.index}, {len(sw.states)} distinct disk states, "
            f"{min(len(sw.states), ctx.opts.max_resumes)} resumed; {len(unloadable)} state(s) hold no loadable file",
            {"points": len(sw.points), "states": len(sw.states), "unloadable_states": unloadable},
        )
    )
    return not failed and not unloadable
