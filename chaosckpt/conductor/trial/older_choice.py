"""Which checkpoint a resume loaded, by its files: for a resume that took an older checkpoint than the last good
one, which newer complete checkpoint it passed over; for one that took another set of tensors from a checkpoint
(an EMA copy), which checkpoint that was.

Whatever the framework, the resume's own ``load`` events say which file it read before its first step, and the
faulted run's saves say which files held the last good checkpoint. When those differ, the cause is the resume's
choice, not the fault: it read ``last.ckpt`` (step 16) while ``epoch=4-step=20.ckpt`` was complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import RunLog
from chaosckpt.conductor.trial.context import rel
from chaosckpt.conductor.trial.faulted import Faulted


def _loaded(resume: RunLog) -> Optional[str]:
    """The file the resume's trainer last loaded before its first step."""
    trainer = resume.trainer()
    if trainer is None or not trainer.steps:
        return None
    first = trainer.steps[0].get("ts", float("inf"))
    loads = [e for e in trainer.loads if e.get("ok") and isinstance(e.get("path"), str) and e.get("ts", 0) <= first]
    return loads[-1]["path"] if loads else None


def step_loaded(run: Faulted, resume: RunLog) -> Optional[int]:
    """The step of the complete checkpoint whose files hold the one the resume last loaded before its first step:
    where it resumed from when its weights match no recorded state (it took another set of tensors from it)."""
    loaded = _loaded(resume)
    if loaded is None:
        return None
    held = [s.step for s in run.completed if s not in run.gone
            and any(loaded in (path, s.landing(path)) for path in s.paths())]
    return held[-1] if held else None


def passed_over(run: Faulted, resume: RunLog, recovered: int, work: Path) -> List[Finding]:
    """``resume-chose-older`` when the resume started from step ``recovered``, older than the last good
    checkpoint, loading a file that is not one of the last good checkpoint's."""
    good = [s for s in run.completed if s not in run.gone]
    loaded = _loaded(resume)
    if not good or loaded is None or recovered >= good[-1].step:
        return []
    newest = good[-1]
    files = newest.paths()
    if not files or loaded in files:
        return []
    shown = [rel(p, work) for p in files]
    return [Finding(
        "resume-chose-older",
        f"the resume loaded {rel(loaded, work)}, the checkpoint of step {recovered}, while the checkpoint of step "
        f"{newest.step} was complete on disk as {', '.join(shown)}: resume from the newest complete checkpoint "
        "(Lightning: save_last=\"link\", or the newest epoch file; a plain job: the newest file whose save finished)",
        {"loaded": rel(loaded, work), "loaded_step": recovered, "newest": shown, "newest_step": newest.step},
    )]
