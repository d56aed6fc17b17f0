"""When the job's RNG state was captured and restored, against the draws around the save.

A stream the resume restored exactly as it was when the save began can still differ at the next step: the
uninterrupted run drew from it after the capture and before that step (an evaluation pass after a per-epoch
``save_state``: ``rng-captured-early``), or the resumed run drew from it after its restore and before its first
step where the uninterrupted run did not (a DataLoader iterator made on resume draws its seed from torch's stream:
``rng-drawn-after-restore``). Saving and restoring the stream again fixes neither; the advice is about timing.

Each is named only on evidence: a run's state when its next step's first batch was fetched (or at that step)
still equal to the state at the save shows that run drew nothing in between, so the other one did; else, for
torch's stream, which a DataLoader without a generator draws from when it makes an iterator, a DataLoader pass
one run began between the save (or restore) and the step and the other did not. Without evidence the stream is
left to ``rng-not-restored``.
"""

from __future__ import annotations

from typing import Dict, List, Set, Tuple

from chaosckpt.conductor.runs.runlog import Event, ProcessLog
from chaosckpt.protocol import FindingKind

CAPTURED_EARLY: FindingKind = "rng-captured-early"
DRAWN_AFTER_RESTORE: FindingKind = "rng-drawn-after-restore"


def timing(reference: ProcessLog, resume: ProcessLog, start: int) -> Dict[str, List[FindingKind]]:
    """For each stream the resume restored exactly as the reference had it when its save at step ``start``
    began, the timing findings its evidence supports (none: the caller says it was not restored).

    Only a stream the resume restored is judged: its state right after the resume's last RNG restore is the one
    captured. A stream equal to it only at the resume's first step proves nothing: a private generator that is
    never saved, seeded anew and drawn once for the resumed epoch's iterator, is in the state the uninterrupted
    run's had at the save."""
    rng_restores = [r for r in resume.restores if "rng" in r]
    saves = [s for s in reference.saves if s.step == start and s.rng]
    if not rng_restores or not saves or not resume.steps or start >= len(reference.steps):
        return {}
    save = saves[-1]
    after_restore = rng_restores[-1]["rng"]
    ours, theirs = resume.steps[0], reference.steps[start]
    began_after_save = _passes(reference, start, save.ts)
    began_before_resume = _passes(resume, 0, 0.0)
    out: Dict[str, List[str]] = {}
    for name, captured in save.rng.items():
        if captured != after_restore.get(name):
            continue
        if _untouched(ours, name, captured):
            out[name] = [CAPTURED_EARLY]
        elif _untouched(theirs, name, captured):
            out[name] = [DRAWN_AFTER_RESTORE]
        elif name == "torch":
            kinds = ([CAPTURED_EARLY] if began_after_save - began_before_resume else []) + \
                    ([DRAWN_AFTER_RESTORE] if began_before_resume - began_after_save else [])
            if kinds:
                out[name] = kinds
    return out


def _untouched(step: Event, name: str, captured: str) -> bool:
    """The run drew nothing from ``name`` between the save (or restore) and this step's first batch: its state
    then, or at the step itself, was still ``captured``."""
    return captured in (step.get("rng", {}).get(name), step.get("rng_fetch", {}).get(name))


def _passes(proc: ProcessLog, step: int, since: float) -> Set[Tuple[object, object]]:
    """The DataLoader passes (by sampler and size) the process began at ``step`` that ended after ``since``."""
    return {(p.get("sampler"), p.get("size")) for p in proc.passes if p.get("step") == step and p["ts"] > since}


def message(kind: str, stream: str, start: int) -> str:
    """What happened to ``stream`` (a display name) and the fix, for a resume from the save at step ``start``."""
    restored = (f"the {stream} random stream was restored exactly as the job captured it at the save at step "
                f"{start}, yet at step {start + 1} it differs from the uninterrupted run's: ")
    if kind == CAPTURED_EARLY:
        return (restored + "between the capture and the next step the uninterrupted run drew from it (an evaluation "
                "pass after the save, say), which no restore replays. Capture the RNG state right before the next "
                "training step (after any evaluation), or re-seed it deterministically at each epoch start")
    return (restored + "the resumed run drew from it after the restore and before its first step, where the "
            "uninterrupted run did not (a DataLoader iterator made on resume, as skip_first_batches does, draws its "
            "seed from torch's stream unless the DataLoader has its own generator=). Restore the RNG state after "
            "making the iterator, right before the first step, or give the DataLoader its own generator")
