"""Checkpoints judged as a whole: which per-checkpoint folder a checkpoint lives in, whether it was still
there when the fault hit, and what the job's rotation and resume did with complete and incomplete ones."""

from __future__ import annotations

import os
from typing import Callable, List, Optional

from chaosckpt.conductor.disk.file_names import DCP_METADATA
from chaosckpt.conductor.faults.arming import location
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog, Save


def folder(save: Save) -> Optional[str]:
    """The numbered folder (``checkpoint-8/``, ``checkpoint_2/``, a DCP ``step_8/``) that holds all the
    checkpoint's files, if one does."""
    paths = save.paths()
    if paths and all(f.get("via") == "dcp" for f in save.files) and save.path is not None:
        return save.path if location(os.path.join(save.path, DCP_METADATA)) != save.path else None
    folders = {os.path.dirname(p) for p in paths}
    if len(folders) != 1:
        return None
    (only,) = folders
    return only if location(paths[0]) != only else None


def gone(completed: List[Save]) -> List[Save]:
    """Complete checkpoints whose folder is gone now: called right after the faulted run, those the job had
    deleted when the fault hit (rotation)."""
    return [s for s in completed if folder(s) is not None and not os.path.isdir(folder(s))]


def rotation_finding(completed: List[Save], deleted: List[Save], interrupted: Optional[Save],
                     name: Callable[[str], str]) -> Optional[Finding]:
    """The job deleted its newest complete checkpoint (``deleted``: those gone at the fault) while the next one
    was still being written."""
    if interrupted is None or not completed or completed[-1] not in deleted:
        return None
    last = completed[-1]
    kept = [s for s in completed if s not in deleted]
    left = f"; the newest left is step {kept[-1].step}" if kept else "; no complete checkpoint was left"
    if interrupted.thread is not None:
        when, fix = " still being written in the background", (
            "wait for the new save to finish (its future's result(), or join its thread) before deleting the "
            "old one")
    else:
        when, fix = "", ("delete old checkpoints only after the new one is complete (with Accelerate's total_limit, "
                         "rotate after save_state returns, or keep total_limit >= 2 and resume from the newest "
                         "complete folder)")
    return Finding(
        "rotation-before-complete",
        f"the job deleted {name(folder(last))} (step {last.step}), its newest complete checkpoint, while "
        f"checkpoint {interrupted.index} was{when} and not yet complete{left}: {fix}",
        {"deleted_step": last.step, "path": name(folder(last)), "interrupted_save": interrupted.index},
    )


def chose_incomplete(interrupted: Optional[Save], completed: List[Save], deleted: List[Save], resume: RunLog,
                     error: Optional[str], name: Callable[[str], str]) -> Optional[Finding]:
    """The resume took the interrupted (incomplete) checkpoint's folder while a complete older one was there."""
    where = folder(interrupted) if interrupted is not None else None
    kept = [s for s in completed if s not in deleted]
    if where is None or not kept or folder(kept[-1]) == where:
        return None
    touched = [e.get("path") for p in resume.processes for e in p.loads]
    inside = any(p is not None and (p == where or p.startswith(where + os.sep)) for p in touched)
    if not inside and not (error and (name(where) + os.sep in error or where + os.sep in error)):
        return None
    older = name(folder(kept[-1]) or kept[-1].path or "")
    if interrupted.path == where:  # a DCP folder: dcp.save writes .metadata last, on rank 0
        kind, advice = "resume-chose-dcp-without-metadata", (
            f"the resume took {name(where)}, a DCP folder the interrupted dcp.save left without .metadata, while "
            f"{older} (step {kept[-1].step}) was complete: resume from the newest folder holding .metadata")
    else:
        kind, advice = "resume-chose-incomplete", (
            f"the resume took {name(where)}, which the interrupted checkpoint {interrupted.index} left incomplete, "
            f"while {older} (step {kept[-1].step}) was complete: resume from the newest checkpoint whose last "
            "file exists (for the Hugging Face Trainer, the newest checkpoint-N/ holding trainer_state.json, "
            "passed as resume_from_checkpoint=PATH instead of True)")
    return Finding(kind, advice, {"path": name(where), "complete_step": kept[-1].step})


def interrupted_save(proc: ProcessLog) -> Optional[Save]:
    """The checkpoint the fault hit."""
    if proc.fault is None:
        return None
    found = [s for s in proc.saves if s.index == proc.fault.get("save")]
    return found[0] if found else None


def good_part(interrupted: Optional[Save]) -> List[Save]:
    """The interrupted checkpoint, when a file of it that holds a whole training state was finished before the
    fault (Lightning's ``epoch=E-step=N.ckpt`` before its ``last.ckpt``): that state is good."""
    if interrupted is not None and any(f.get("ok") and f.get("whole") for f in interrupted.files):
        return [interrupted]
    return []
