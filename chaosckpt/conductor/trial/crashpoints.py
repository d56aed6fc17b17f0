"""The sweep ending of a trial: every crash point of the save, its disk state, a load check, and full
resumes of the first few distinct states."""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator, NamedTuple, Optional

from chaosckpt.conductor.disk import crash, sweep
from chaosckpt.conductor.disk.loadcheck import LoadChecker
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import sandbox
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import render, score
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted
from chaosckpt.conductor.trial.measured import Measured
from chaosckpt.conductor.trial.plan import resume_stop


class Swept(NamedTuple):
    """What the sweep has measured so far; ``met`` once it is over: whether each resumed state started where
    the scenario expects and every state holds a loadable file."""

    measured: Measured
    met: Optional[bool] = None


def sweep_save(ctx: Context, ref: ProcessLog, armed: Armed, run: Faulted) -> Iterator[Swept]:
    """Every crash point of the save; what it measured before each resume and at its end, so that a trial one
    of the resumes stops keeps what the sweep had measured by then."""
    scen, work, roots = ctx.scenario, armed.work, armed.roots
    proc = run.proc
    target = [s for s in proc.saves if s.index == scen.trigger.save][0]
    model = scen.kind.crash_model(scen.trigger)
    earlier = [s for s in proc.completed_saves() if s.index < target.index]
    last_good = earlier[-1].step if earlier else None
    measured = Measured({**run.fault, "model": model}, last_good)
    yield Swept(measured)

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
            lost = max(measured.lost_steps or 0, (run.step or 0) - rec.recovered_step)
            measured = dataclasses.replace(measured, lost_steps=lost)
            yield Swept(measured)
        failed |= rec.outcome not in scen.expect.recovered
        for point in sw.points:
            if point.state == index:
                point.outcome = outcome
    unloadable = [
        i for i in range(len(sw.states))
        if not any(f.get("loads") for p in sw.points if p.state == i for f in p.files)
    ]
    summary = Finding(
        "sweep",
        f"{len(sw.points)} crash points in save {target.index}, {len(sw.states)} distinct disk states, "
        f"{min(len(sw.states), ctx.opts.max_resumes)} resumed; {len(unloadable)} state(s) hold no loadable file",
        {"points": len(sw.points), "states": len(sw.states), "unloadable_states": unloadable},
    )
    yield Swept(dataclasses.replace(measured, sweep=[p.to_dict() for p in sw.points]).found(summary),
                not failed and not unloadable)
