"""The horizon: stop the job a number of steps after the saves a trial needs, so a trial's cost does
not grow with the length of the training run.

``CHAOSCKPT_STOP`` holds ``{"steps": N, "after": [condition, ...]}``; a condition is met by the first save
that ends (returned or raised) with ``{"save": k}`` its index at least k, ``{"step": s}`` the steps done
at least s, or ``{"seconds": t}`` at least t seconds after the agent started. Once every condition is
met (at once when there is none), the job runs N more steps, then holds still for the conductor's
SIGKILL, as a halted fault does.
"""

from __future__ import annotations

import time
from typing import List, Optional


class Horizon:
    """When this process is to stop, counted in its own optimizer steps."""

    def __init__(self, spec: dict, started: Optional[float] = None) -> None:
        self.steps = int(spec["steps"])
        self.waiting: List[dict] = list(spec.get("after") or [])
        self.started = time.time() if started is None else started
        self.stop_at: Optional[int] = None if self.waiting else self.steps

    def saved(self, index: int, step: int, began: float) -> None:
        """Save ``index``, begun at time ``began``, ended: drop the conditions it meets; with none left, the
        stop is ``steps`` from here."""
        if self.stop_at is not None:
            return
        now = began - self.started
        self.waiting = [c for c in self.waiting if not met(c, index, step, now)]
        if not self.waiting:
            self.stop_at = step + self.steps

    def due(self, steps_done: int) -> bool:
        return self.stop_at is not None and steps_done >= self.stop_at


def met(condition: dict, index: int, step: int, seconds: float) -> bool:
    """Whether save number ``index``, ending after ``step`` steps and ``seconds`` into the run, meets ``condition``."""
    if "save" in condition:
        return index >= condition["save"]
    if "step" in condition:
        return step >= condition["step"]
    return seconds >= condition.get("seconds", 0)
