"""How far each run of a trial goes: the reference and the faulted run ``horizon`` steps past the save the
fault needs, the resume ``horizon`` steps past where it started. ``None`` (``--horizon end``) runs every
run to the job's end, as the job itself would.

A stop spec is what the agent reads from ``CHAOSCKPT_STOP`` (see ``chaosckpt.agent.stopping``); a run that
reaches it is killed like a halted fault and is not a crash.
"""

from __future__ import annotations

from typing import Iterable, List, Optional

from chaosckpt.agent.stopping import met
from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.faults.trigger import Trigger, duration_s
from chaosckpt.conductor.runs.runlog import RunLog

DEFAULT = 50
END = "end"


def parse(value: object, where: str = "--horizon") -> Optional[int]:
    """Steps from ``N`` (a whole number >= 1) or None from ``end``; anything else is a usage error."""
    if value is None or value == END:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise UsageError(f"{where} {shown(value)} is invalid: give the number of steps compared after the resume point "
                     f"(a whole number >= 1), or '{END}' to run every run to the job's end")


def condition(trigger: Trigger) -> Optional[dict]:
    """What the reference must have saved for this fault to be placed; None when only its end can tell
    (a save counted from the end)."""
    if trigger.step is not None:
        return {"step": trigger.step}
    if trigger.after is not None:
        return {"seconds": duration_s(trigger.after)}
    if trigger.save < 0:
        return None
    return {"save": trigger.save}


def reference_stop(horizon: Optional[int], conditions: Iterable[Optional[dict]]) -> Optional[dict]:
    """Stop the reference ``horizon`` steps after the last fault point any planned trial needs."""
    needed: List[dict] = []
    for cond in conditions:
        if cond is None:
            return None
        if cond not in needed:
            needed.append(cond)
    if horizon is None or not needed:
        return None
    return {"steps": horizon, "after": needed}


def trial_stop(horizon: Optional[int], trigger: Trigger) -> Optional[dict]:
    """The reference's (and the faulted run's) horizon for one trial alone."""
    return reference_stop(horizon, [condition(trigger)])


def resume_stop(horizon: Optional[int]) -> Optional[dict]:
    """Stop a resumed job ``horizon`` steps after its first."""
    return None if horizon is None else {"steps": horizon}


def covers(log: RunLog, stopped: bool, stop: Optional[dict]) -> bool:
    """Whether a reference run (``stopped`` by its horizon, or not) reached as far as ``stop`` asks."""
    if not stopped:
        return True
    if stop is None:
        return False
    saver, trainer = log.saver(), log.trainer()
    if saver is None or trainer is None or saver.hello is None:
        return False
    waiting = list(stop.get("after") or [])
    reach = stop["steps"] if not waiting else None
    for save in saver.completed_saves():
        if reach is not None:
            break
        waiting = [c for c in waiting if not met(c, save.index, save.step, save.ts - saver.hello["ts"])]
        if not waiting:
            reach = save.step + stop["steps"]
    return reach is not None and len(trainer.steps) >= reach
