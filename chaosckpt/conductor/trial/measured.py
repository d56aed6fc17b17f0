"""What an ending of a trial measured after its fault (scoring the resume, judging a job that carried on, a
sweep of crash points), as one value the trial's result is assembled from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List, Optional, Tuple

from chaosckpt.conductor.results.result import CrashPointRecord, FaultRecord, Finding, Outcome, RankRecord
from chaosckpt.conductor.trial.compare import Trajectory


@dataclass(frozen=True)
class Measured:
    """The verdict's fields an ending decides: the fault record and last good step it leaves, where the job
    resumed from, its trajectory, its ranks or its crash points, and its findings (``lead`` before every other
    finding of the trial)."""

    fault: Optional[FaultRecord] = None
    last_good_step: Optional[int] = None
    outcome: Optional[Outcome] = None
    recovered_step: Optional[int] = None
    error: Optional[str] = None
    error_path: Optional[str] = None
    lost_steps: Optional[int] = None
    reproduced: Optional[bool] = None
    compared_steps: int = 0
    first_divergent_step: Optional[int] = None
    max_loss_diff: Optional[float] = None
    ranks: Tuple[RankRecord, ...] = ()
    sweep: Optional[List[CrashPointRecord]] = None
    findings: Tuple[Finding, ...] = ()
    lead: Optional[Finding] = None
    streams_restored: Optional[bool] = None
    """The trajectory's ``streams_restored``: the random streams were as the uninterrupted run's at the resume."""

    def found(self, *findings: Finding) -> Measured:
        """These values with ``findings`` after those already found."""
        return dataclasses.replace(self, findings=self.findings + findings)

    def traced(self, trajectory: Trajectory) -> Measured:
        """These values with a resumed run's ``trajectory`` against the reference, and its findings."""
        return dataclasses.replace(
            self, reproduced=trajectory.reproduced, compared_steps=trajectory.compared,
            first_divergent_step=trajectory.first_divergent_step, max_loss_diff=trajectory.max_loss_diff,
            streams_restored=trajectory.streams_restored,
        ).found(*trajectory.findings)
