"""Lining a resumed run's steps up with the uninterrupted run's by the batches they trained on, not by step counters.

Each step event carries ``batch``, the CRC of the dataset indices of the batch the step trained on (the agent's
DataLoader patch), or else ``input``, the fingerprint of what the model consumed (``agent/consumed.py``: a loop
that slices a tensor with a counter, an iterable dataset). A resume that starts from the checkpoint of step S should train its first step on the batch the
uninterrupted run trained on at step S+1. When it trains on the batch of a later step instead, it skipped the steps
between (a mid-epoch checkpoint that recorded only the epoch, resumed at the next epoch); on an earlier one, it
replays steps the checkpoint already holds (the epoch restarted from its first batch). Both are named with the steps
they concern. Only a resume that began a DataLoader pass at its first batch, from a checkpoint taken inside a
pass, is named so: that is where an epoch counter without the position in the epoch leads. A checkpoint taken at
the boundary of a pass is left to the pass-order check (``coverage.order``), and a resume that began inside a pass
on another pass's batches (a loader generator not restored) to the random-stream checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import Event, ProcessLog

WINDOW = 8
"""A candidate alignment must agree on this many consecutive batches (fewer where a run ends first)."""

FIX = ("save the position in the epoch (the step count, or the sampler's or DataLoader's state) in the checkpoint "
       "and, on resume, skip the batches of the epoch it already trained on")


@dataclass(frozen=True)
class Shift:
    """Where a resume's first step landed: ``start`` steps restored, the batch of the uninterrupted run's step
    ``aligned`` + 1 trained on."""

    start: int
    aligned: int

    @property
    def skipped(self) -> bool:
        return self.aligned > self.start

    @property
    def steps(self) -> Tuple[int, int]:
        """The first and last global step skipped or replayed."""
        return (self.start + 1, self.aligned) if self.skipped else (self.aligned + 1, self.start)


def batch(step: Event) -> Optional[str]:
    """What a step trained on: its DataLoader batch's indices, else the fingerprint of what the model consumed."""
    named = step.get("batch")
    return named if named is not None else step.get("input")


def _agree(reference: List[Event], resumed: List[Event], at: int) -> bool:
    """Whether the resumed steps trained on the reference's batches from its step ``at`` + 1 on."""
    count = min(len(resumed), len(reference) - at, WINDOW)
    return count > 0 and all(
        batch(resumed[i]) is not None and batch(resumed[i]) == batch(reference[at + i]) for i in range(count))


def shift(reference: List[Event], resumed: List[Event], start: int) -> Optional[Shift]:
    """The resumed steps' shift against the reference's after ``start`` steps, or None when the first resumed step
    trained on the expected batch, or no single other position explains its batches. Among several positions, the
    one after which the reference took as many steps as the resume did, else the nearest to ``start``."""
    if not resumed or batch(resumed[0]) is None or start >= len(reference):
        return None
    if batch(resumed[0]) == batch(reference[start]):
        return None
    candidates = [at for at in range(len(reference)) if at != start and _agree(reference, resumed, at)]
    by_count = [at for at in candidates if len(reference) - at == len(resumed)]
    chosen = by_count if len(by_count) == 1 else candidates
    if not chosen:
        return None
    nearest = min(abs(at - start) for at in chosen)
    best = [at for at in chosen if abs(at - start) == nearest]
    return Shift(start, best[0]) if len(best) == 1 else None


def training_passes(proc: ProcessLog) -> List[Event]:
    """The ``sampler`` events of the loader that fed training: the stream (sampler class, dataset size) that handed
    out the most indices, so that an evaluation loader's passes are left out."""
    totals: Dict[Tuple[object, object], int] = {}
    for event in proc.passes:
        key = (event.get("sampler"), event.get("size"))
        totals[key] = totals.get(key, 0) + (event.get("n") or 0)
    if not totals:
        return []
    main = max(totals, key=lambda k: totals[k])
    return [e for e in proc.passes if (e.get("sampler"), e.get("size")) == main]


def _span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _epoch(event: Event) -> str:
    return f" (sampler epoch {event['epoch']})" if event.get("epoch") is not None else ""


def _context(found: Shift, passes: List[Event]) -> str:
    """Where the checkpoint and the resume's first batch stood in the reference's DataLoader passes, in words."""
    before = [e for e in passes if e.get("step", 0) < found.start]
    began = {e.get("step"): e for e in passes}
    if not before or found.aligned not in began:
        return ""
    holding = max(before, key=lambda e: e.get("step", 0))
    into = found.start - holding["step"]
    taken = f"the checkpoint was taken {into} step{'' if into == 1 else 's'} into a DataLoader pass{_epoch(holding)}"
    later = [step for step in began if step > holding["step"]]
    if found.skipped and min(later) == found.aligned:
        return f"; {taken}, and the resume began the next pass{_epoch(began[found.aligned])} at its first batch"
    if not found.skipped and holding["step"] == found.aligned:
        return f"; {taken}, and the resume began that pass again at its first batch"
    return ""


def finding(reference: ProcessLog, resumed: ProcessLog, start: int) -> Optional[Finding]:
    """``steps-skipped`` or ``steps-replayed`` when the resume's batches line up with the reference's elsewhere
    than after ``start`` steps, with the steps it concerns and its fix; None when they line up there."""
    passes = training_passes(reference)
    starts = {e.get("step") for e in passes}
    if start in starts:
        return None
    found = shift(reference.steps, resumed.steps, start)
    if found is None or (starts and found.aligned not in starts):
        return None
    first, last = found.steps
    evidence = {"first_step": first, "last_step": last, "checkpoint_step": start, "batch_of_step": found.aligned + 1}
    where = (f"after the checkpoint of step {start}, its first step trained on the batch the uninterrupted run "
             f"trained on at step {found.aligned + 1}" + _context(found, passes))
    if found.skipped:
        return Finding("steps-skipped", f"the resume skipped {_span(first, last)} of the uninterrupted run: {where}; "
                       f"{FIX}", evidence)
    return Finding("steps-replayed", f"the resume trained again on the batches of {_span(first, last)}, which the "
                   f"checkpoint already held: {where}; {FIX}", evidence)
