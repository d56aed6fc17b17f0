"""Where a resumed process's training begins: at the state its last load before training restored.

A job may take optimizer steps before it loads its checkpoint (one with zero gradients or a zero learning rate, to
create the optimizer's state the load then fills in). Its first step then carries the digest of the initial model,
which would read as a restart from scratch. The agent takes a new digest at the first step after every load; the
first of those that is a state a run saved is where the resume starts, and the steps before it are none of the
resume's: they are dropped from its log, with every step count after them moved back by as many.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import Event, ProcessLog, RunLog
from chaosckpt.conductor.trial.compare import DigestTable


def _saved(table: DigestTable, digest: Optional[str]) -> bool:
    """Whether ``digest`` is a state some run saved after training (not the initial model)."""
    return digest is not None and table.get(digest, 0) > 0


def restore_index(proc: ProcessLog, table: DigestTable) -> int:
    """Index of the process's first step after the load that restored a saved state, when its first step did not
    already start from one; 0 otherwise."""
    steps = proc.steps
    if not steps or _saved(table, steps[0].get("digest")):
        return 0
    return next((k for k in range(1, len(steps)) if _saved(table, steps[k].get("digest"))), 0)


def _moved(events: List[Event], by: int) -> List[Event]:
    """Events whose ``step`` is at least ``by``, with ``by`` taken from it."""
    return [{**e, "step": e["step"] - by} for e in events if e.get("step", 0) >= by]


def _from(proc: ProcessLog, k: int) -> ProcessLog:
    """``proc`` as if its step ``k`` + 1 had been its first."""
    saves = [dataclasses.replace(s, step=s.step - k) for s in proc.saves if s.step >= k]
    uncaught = None if proc.uncaught is None else {**proc.uncaught, "step": max(0, proc.uncaught["step"] - k)}
    return dataclasses.replace(proc, steps=proc.steps[k:], saves=saves, passes=_moved(proc.passes, k),
                               uncaught=uncaught, stopped=None if proc.stopped is None else proc.stopped - k)


def after_restore(log: RunLog, table: DigestTable) -> Tuple[RunLog, int]:
    """The resume's log from each process's restore point on, and how many steps the trainer took before it."""
    cuts = [restore_index(proc, table) for proc in log.processes]
    trainer = log.trainer()
    before = next((k for proc, k in zip(log.processes, cuts) if proc is trainer), 0)
    return RunLog([_from(proc, k) if k else proc for proc, k in zip(log.processes, cuts)]), before


def before_load(steps: int) -> Finding:
    """The note that ``steps`` steps before the load were not counted as the resume's."""
    many, they = (f"{steps} optimizer steps", "they are") if steps > 1 else ("1 optimizer step", "it is")
    return Finding(
        "steps-before-load",
        f"the resumed run took {many} before it loaded its checkpoint (creating the optimizer's state, or a "
        f"warm-up): {they} not counted as the resume's, which is judged from the state the load restored and "
        "the steps after it",
        {"steps": steps},
    )
