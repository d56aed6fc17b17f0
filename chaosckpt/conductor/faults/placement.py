"""Where a fault goes, in saves of the reference run: save ``k``, the k-th save from its end, the first
save at or after a step, or the first save at or after a time into the run."""

from __future__ import annotations

import dataclasses

from chaosckpt.conductor.faults.arming import NEVER_SAVED, NotArmable
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.faults.trigger import duration_s
from chaosckpt.conductor.scenario import Scenario


def resolve(scenario: Scenario, reference: RunLog) -> Scenario:
    """``scenario`` with its fault placed at a save number counted from the reference run's start."""
    trigger = scenario.trigger
    if trigger.step is None and trigger.after is None and trigger.save > 0:
        return scenario
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    if trigger.step is not None:
        found = [i for i, s in enumerate(saves, 1) if s.step >= trigger.step]
        last = f"its last at step {saves[-1].step}" if saves else "none at all"
        where = f"at or after step {trigger.step} ({last})"
    elif trigger.after is not None:
        start = (saver.hello or {}).get("ts", saves[0].ts if saves else 0.0) if saver is not None else 0.0
        seconds = duration_s(trigger.after) or 0.0  # checked when the scenario was loaded
        found = [i for i, s in enumerate(saves, 1) if s.ts - start >= seconds]
        last = f"its last {saves[-1].ts - start:.0f} s in" if saves else "none at all"
        where = f"at or after {trigger.after} into the run ({last})"
    else:
        found = [len(saves) + trigger.save + 1] if len(saves) + trigger.save >= 0 else []
        where = f"number {trigger.save} counted from the end"
    if not saves:
        raise NotArmable(NEVER_SAVED)
    if not found:
        raise NotArmable(f"the uninterrupted run completed {len(saves)} checkpoint save(s), none {where}; "
                         "place the fault earlier (--param save=N, step=S or after=T)")
    placed = dataclasses.replace(trigger, save=found[0], step=None, after=None)
    return dataclasses.replace(scenario, trigger=placed)
