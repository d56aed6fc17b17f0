"""Findings about saves that overlap training (asynchronous checkpoints): a save still being written when the
job exited, and an error in a background save the job never looked at."""

from __future__ import annotations

from typing import Callable, List, Optional

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog

WAIT_FOR_IT = ("wait for every save before the process exits: join the saving thread, or call result() on the "
               "future the save returned (DCP's async_save: its future, or upload_completion; Lightning: "
               "trainer.strategy.checkpoint_io.teardown())")


def unfinished_at_exit(saver: Optional[ProcessLog]) -> List[Finding]:
    """The uninterrupted run exited normally while a background thread was still writing a checkpoint: its
    final checkpoint never landed, whatever the faults do."""
    if saver is None:
        return []
    found = []
    for save in (s for s in saver.saves if s.unfinished):
        where = f" ({saver.shown(save.path)})" if save.path is not None else ""
        by = f" by thread {save.thread}" if save.thread is not None else ""
        state = (f"had been handed to thread {save.thread} and not yet begun writing (a save is in flight from "
                 "its hand-over)" if save.waiting else f"was still being written in the background{by}")
        found.append(Finding(
            "exit-with-save-in-flight",
            f"the uninterrupted run exited while checkpoint {save.index} of step {save.step}{where} {state}: that "
            f"checkpoint never landed, and a resume finds an older one or a torn file; {WAIT_FOR_IT}",
            {"save": save.index, "step": save.step, "thread": save.thread,
             "path": None if save.path is None else saver.shown(save.path), "begun": not save.waiting},
        ))
    return found


def unobserved_error(proc: ProcessLog, name: Callable[[str], str], later: Optional[int] = None) -> List[Finding]:
    """The fault's error in a background save never reached the job: it trained on, believing the checkpoint
    existed (``later``: the step a later resume of what it left started from)."""
    fate = proc.background_error
    if fate is None or fate.get("fate") != "unobserved" or proc.fault is None:
        return []
    fault = proc.fault
    after = sum(1 for s in proc.steps if s["ts"] > fault["ts"])
    writing = f", writing {name(fault['path'])}" if fault.get("path") else ""
    return [Finding(
        "background-error-unobserved",
        f"{fate['error']} in checkpoint {fault['save']}'s background save (thread {fault.get('thread')}{writing}) "
        f"never reached the training: no future's result() raised it and the job did not end on it; it trained "
        f"{after} more step{'s' if after != 1 else ''} believing that checkpoint existed"
        f"{_found(later, proc)}. Keep the save's future "
        "(or the thread's exception) and check it before the next save and before exiting: future.result() "
        "raises it",
        {"save": fault["save"], "thread": fault.get("thread"), "steps_after": after, "error": fate["error"],
         "later_resume_step": later},
    )]


def _found(later: Optional[int], proc: ProcessLog) -> str:
    """What a later resume found, against the step the job had reached."""
    if later is None or not proc.steps:
        return ""
    end = proc.steps[-1]["step"]
    if later >= end:
        return f"; a later resume started from step {later}"
    return f"; a later resume started from step {later}, {end - later} steps before where the job had got to"
