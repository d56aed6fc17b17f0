"""When the job's RNG snapshot was taken: a stream restored exactly as captured at the save can still be wrong,
because the uninterrupted run drew from it after the capture and before its next step (an evaluation pass after a
per-epoch ``save_state``). Saving and restoring it again fixes nothing; capturing it later does."""

from __future__ import annotations

from typing import Dict, Set

from chaosckpt.conductor.runlog import ProcessLog

KIND = "rng-captured-early"


def restored_as_captured(reference: ProcessLog, resume: ProcessLog, start: int) -> Set[str]:
    """Streams the resumed run holds exactly as the uninterrupted run had them when its save at step ``start``
    began.

    The resumed run's state is taken right after its last RNG restore (the process-wide streams), else at its
    first step (a stream that step does not draw from, a private generator). Only a resume that restored some
    RNG state is judged: a job that restores nothing is told its streams were not restored."""
    rng_restores = [r for r in resume.restores if "rng" in r]
    if not rng_restores:
        return set()
    captured: Dict[str, Set[str]] = {}
    for save in reference.saves:
        if save.step == start:
            for name, value in save.rng.items():
                captured.setdefault(name, set()).add(value)
    after_restore = rng_restores[-1]["rng"]
    at_first_step = resume.steps[0].get("rng", {}) if resume.steps else {}
    return {name for name, states in captured.items()
            if after_restore.get(name) in states or at_first_step.get(name) in states}


def message(stream: str, start: int) -> str:
    """What happened to ``stream`` (a display name) and the fix, for a resume from the save at step ``start``."""
    return (f"the {stream} random stream was restored exactly as the job captured it at the save at step {start}, "
            f"yet at step {start + 1} it differs from the uninterrupted run's: between the capture and the next step "
            "the uninterrupted run drew from it (an evaluation pass after the save, say), which no restore replays. "
            "Capture the RNG state right before the next training step (after any evaluation), or re-seed it "
            "deterministically at each epoch start")

