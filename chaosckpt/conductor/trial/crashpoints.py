"""The sweep ending of a trial: every crash point of the save, its disk state, a load check, the states grouped
into classes a restarted job cannot tell apart, and a full resume of one state of each class."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple

from chaosckpt.conductor.disk import crash, journal, sweep
from chaosckpt.conductor.disk.loadcheck import LoadChecker
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import sandbox
from chaosckpt.conductor.runs.runlog import RunLog, Save
from chaosckpt.conductor.trial import render
from chaosckpt.conductor.trial.arm import Armed
from chaosckpt.conductor.trial.context import Context, rel
from chaosckpt.conductor.trial.faulted import Faulted
from chaosckpt.conductor.trial.measured import Measured
from chaosckpt.conductor.trial.options import Stop
from chaosckpt.conductor.trial.plan import resume_stop
from chaosckpt.conductor.trial.resume import Resumed
from chaosckpt.conductor.trial.scoring import met, score_trial


class Swept(NamedTuple):
    """What the sweep has measured so far; ``met`` once it is over: whether each resumed class started where
    the scenario expects and every state holds a loadable file (a class left untried is a finding of its own,
    which keeps the trial from passing)."""

    measured: Measured
    met: Optional[bool] = None


def sweep_save(ctx: Context, reference: RunLog, armed: Armed, run: Faulted) -> Iterator[Swept]:
    """Every crash point of the save; what it measured before each resume and at its end, so that a trial one
    of the resumes stops keeps what the sweep had measured by then."""
    scen, work = ctx.scenario, armed.work
    target = [s for s in run.proc.saves if s.index == scen.trigger.save][0]
    model = scen.kind.crash_model(scen.trigger)
    earlier = [s for s in run.proc.completed_saves() if s.index < target.index]
    last_good = earlier[-1].step if earlier else None
    measured = Measured({**run.fault, "model": model}, last_good)
    yield Swept(measured)

    def name(path: str) -> str:
        return rel(path, work) or path

    sw = sweep.explore(armed.disk, run.log.save_ops(), _in_save(run, target), model, name,
                       run.log.checkpoint_files(), armed.end, armed.native)
    checker = LoadChecker()
    try:
        sweep.classify(sw, sweep.check_states(sw, armed.roots, ctx.sandbox_root / "sweep-states", checker,
                                              armed.disk.keeps))
    finally:
        checker.close()
    judged = dataclasses.replace(run, completed=earlier, gone=[])  # each state's last good is the save before
    failed = False
    for state in sw.representatives[: ctx.opts.max_resumes]:
        outcome, ok, recovered = _resume_state(ctx, reference, armed, judged, sw.states[state], state)
        failed |= not ok
        if recovered is not None:  # the most work any resumed state lost
            lost = max(measured.lost_steps or 0, (run.step or 0) - recovered)
            measured = dataclasses.replace(measured, lost_steps=lost)
            yield Swept(measured)
        for point in sw.points:
            if point.state == state:
                point.outcome, point.resumed, point.met = outcome, True, ok
    unloadable = [
        i for i in range(len(sw.states))
        if not any(f.get("loads") for p in sw.points if p.state == i for f in p.files)
    ]
    refused = journal.finding(run.log.dropped_ops() + sw.refused, name)  # first: it makes the rest untrustworthy
    yield Swept(dataclasses.replace(measured, sweep=[p.to_dict() for p in sw.points]).found(
        *refused, *_summary(ctx, sw, target.index, unloadable)), not failed and not unloadable)


def _in_save(run: Faulted, target: Save) -> Callable[[dict], bool]:
    """Whether a journal operation is one of the save's: made by a process that writes it (each rank writes its
    own part), from the save's start in that process on."""
    first = {p.pid: (s.op or 0) + 1 for p in run.log.ranks().values() for s in p.saves if s.index == target.index}
    first[run.proc.pid] = (target.op or 0) + 1
    return lambda op: op["pid"] in first and op["n"] >= first[op["pid"]]


def _resume_state(ctx: Context, reference: RunLog, armed: Armed, run: Faulted, entries: List[crash.Entry],
                  state: int) -> Tuple[str, bool, Optional[int]]:
    """Rebuild one disk state in a fresh sandbox and resume the job there, judged as a trial's resume is (where
    it started, then whether it reproduced the uninterrupted run, ``scoring.met``): its outcome in words, whether
    it met the scenario's expectation, and the step it resumed from."""
    work = armed.work
    box = sandbox.create(work, ctx.sandbox_root / f"sweep-{state}")
    crash.materialize(entries, armed.roots, box, lambda p: str(box / os.path.relpath(p, work.resolve())),
                      armed.disk.keeps)
    result = ctx.launch(f"resume-state-{state}", ctx.opts.resume_command, box, stop=resume_stop(ctx))
    scored = score_trial(ctx, reference, dataclasses.replace(armed, work=box), run,
                         Resumed(result, RunLog.read(result.events_dir)))
    measured = scored.measured
    outcome = measured.outcome + (f" (step {measured.recovered_step})" if measured.recovered_step is not None else "")
    if measured.error:
        outcome += f": {render.describe_error(measured.error, measured.error_path is not None)}"
    elif measured.reproduced is False:
        outcome += f", diverged at step {measured.first_divergent_step}"
    try:
        ok = met(ctx, scored)
    except Stop as stop:
        outcome, ok = f"{outcome}, not judged: {stop.detail}", False
    return outcome, ok, measured.recovered_step


def _summary(ctx: Context, sw: sweep.Sweep, save: int, unloadable: List[int]) -> List[Finding]:
    """The sweep's summary, and the classes of crash state no resume tried, named by their first crash point."""
    classes = len(sw.representatives)
    left = sweep.untried(sw.points)
    found = [Finding(
        "sweep",
        f"{len(sw.points)} crash points in save {save}, {len(sw.states)} distinct disk states in {classes} "
        f"class{'' if classes == 1 else 'es'} a restarted job can tell apart, {classes - len(left)} resumed; "
        f"{len(unloadable)} state{' holds' if len(unloadable) == 1 else 's hold'} no loadable file",
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
