"""Shrinking a failed trial, as Hypothesis shrinks a failing example: the smallest fault that fails the same way.

A kill or a power loss placed in save ``s`` (by a fraction, a write, a step, a time or at random) that failed is
tried again, one trial at a time and at most ``MAX_TRIES`` of them: at the same point of each earlier save, then,
in the smallest save that still fails, at the first write of the save and at earlier fractions. A try fails the
same way when it fails with the same outcome and the same leading finding. The smallest one found is the line
to keep (``shrunk.json`` in the trial's folder); reports show it under the trial's own replay line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from chaosckpt.conductor import scenario as scenarios
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.result import Trial
from chaosckpt.conductor.results.suite_plan import SHRUNK, Plan, PlannedTrial, trial_dir

MAX_TRIES = 6
PLACEMENT = ("save", "fraction", "write", "step", "after")
"""The trigger keys a shrunk fault replaces: it is placed by a numbered save and a point in it."""


def failure(trial: Trial) -> Tuple[str, Optional[str], Optional[str]]:
    """What makes two failures the same: the status, the outcome and the leading finding's kind."""
    errors = [f.kind for f in trial.findings if f.severity == "error" and not f.ignored]
    lead = errors[0] if errors else (trial.findings[0].kind if trial.findings else None)
    return trial.status, trial.outcome, lead


def shrinkable(planned: PlannedTrial, trial: Optional[Trial], plan: Plan) -> bool:
    """A failed kill or power loss of a one-process job whose fault was placed by hand or at random (``-p save=``,
    ``fraction=``, ``write=``, ``step=``, ``after=``, ``--trials``), not a sweep (which tried every point), run
    on this machine."""
    if trial is None or trial.status != "failed" or planned.sweep or plan.nproc != 1 or not trial.fault:
        return False
    if plan.executor != "local" or not any(k in planned.params for k in PLACEMENT):
        return False
    return scenarios.load(planned.scenario, planned.params).kind.shareable and int(trial.fault.get("save") or 0) >= 1


def search(planned: PlannedTrial, trial: Trial, fails: Callable[[Dict[str, Any]], bool]) -> None:
    """Try smaller placements through ``fails``, smallest first: the same point in each earlier save until one
    fails the same way, then, in the smallest save that does, its first write, then earlier fractions."""
    base = {k: v for k, v in planned.params.items() if k not in PLACEMENT}
    trigger = trial.params.get("trigger", {})
    point = {k: trigger[k] for k in ("fraction", "write") if trigger.get(k) is not None}
    smallest = int(trial.fault["save"])
    for earlier in range(1, smallest):
        if fails({**base, "save": earlier, **point}):
            smallest = earlier
            break
    if "fraction" not in trigger and "write" not in trigger:
        return  # a power loss: it strikes after the save, at no point inside it
    for inside in [{"write": 1}] + [{"fraction": round(point["fraction"] / d, 3)} for d in (4, 2) if "fraction" in point]:
        if inside != point and fails({**base, "save": smallest, **inside}):
            return


def shrink(folder: Path, plan: Plan, planned: PlannedTrial, trial: Trial,
           run: Callable[[PlannedTrial, Path], Trial]) -> Dict[str, Any]:
    """Try smaller faults for the failed ``trial``, each run by ``run`` into a folder of its own; the record kept in
    ``shrunk.json``: every try, and the smallest that failed the same way (its ``params`` and ``replay`` line are
    None when none did)."""
    wanted = failure(trial)
    tried: List[Dict[str, Any]] = []

    def fails(params: Dict[str, Any]) -> bool:
        for done in tried:
            if done["params"] == params:
                return done["same"]
        if len(tried) >= MAX_TRIES:
            return False
        out = trial_dir(folder, planned) / "shrink" / str(len(tried) + 1)
        got = run(PlannedTrial(f"{planned.id}-shrink-{len(tried) + 1}", planned.scenario, params), out)
        tried.append({"params": params, "status": got.status, "headline": got.headline,
                      "same": failure(got) == wanted})
        return tried[-1]["same"]

    search(planned, trial, fails)
    same = [t["params"] for t in tried if t["same"]]
    smallest = min(same, key=_placement) if same else None
    record = {"tried": tried, "params": smallest,
              "replay": plan.replay(PlannedTrial(planned.id, planned.scenario, smallest)) if smallest else None}
    trial_dir(folder, planned).mkdir(parents=True, exist_ok=True)
    atomic.write_text(trial_dir(folder, planned) / SHRUNK, json.dumps(record, indent=2) + "\n")
    return record


def _placement(params: Dict[str, Any]) -> Tuple[int, float]:
    """How early a fault is placed: its save, then its point in it (the first write before any fraction)."""
    return int(params["save"]), 0.0 if params.get("write") == 1 else float(params.get("fraction", 1.0))
