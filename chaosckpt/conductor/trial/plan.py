"""Step 0 and 1b: what the trial needs of each run (how far it goes: the horizon), and, once the reference
run is in, at which of its saves the fault goes."""

from __future__ import annotations

from typing import Optional

from chaosckpt.conductor.faults import placement
from chaosckpt.conductor.faults.arming import NotArmable
from chaosckpt.conductor.runs import horizon
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.context import Context
from chaosckpt.conductor.trial.options import Stop


def run_stop(ctx: Context) -> Optional[dict]:
    """Where the reference and the faulted run stop: ``horizon`` steps past the save the fault needs."""
    return horizon.trial_stop(ctx.opts.horizon, ctx.scenario.trigger)


def resume_stop(ctx: Context) -> Optional[dict]:
    """Where a resumed job stops: ``horizon`` steps past its first."""
    return horizon.resume_stop(ctx.opts.horizon)


def place(ctx: Context, reference: RunLog) -> None:
    """Put the fault at a save number of the reference run (from a step, a time, or a save from the end)."""
    try:
        ctx.scenario = placement.resolve(ctx.scenario, reference)
    except NotArmable as exc:
        raise Stop("fault-not-triggered", str(exc)) from None
