"""Checkpoints judged as a whole: where a checkpoint lives (a per-checkpoint folder, else its files in a folder
shared with others), whether it was still there when the fault hit, and what the job's rotation and resume did with
complete and incomplete ones."""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, List, Optional, Sequence

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


def files(save: Save, writing: Sequence[str] = ()) -> List[str]:
    """The files that hold the checkpoint once its save ended, each at the name a rename gave it; ``writing``
    adds those an interrupted save had open (a file written from memory, which no save call returned for)."""
    return list(dict.fromkeys([*(save.landing(p) for p in save.paths()), *writing]))


def place(save: Save) -> str:
    """What names the checkpoint to the user: its folder, else its first file."""
    return folder(save) or next(iter(files(save)), save.path or "")


def gone(completed: List[Save]) -> List[Save]:
    """Complete checkpoints gone now (their folder, or every file of one that has no folder of its own): called
    right after the faulted run, those the job had deleted when the fault hit (rotation)."""
    return [s for s in completed if _is_gone(s)]


def _is_gone(save: Save) -> bool:
    where = folder(save)
    if where is not None:
        return not os.path.isdir(where)
    held = files(save)
    return bool(held) and not any(os.path.lexists(f) for f in held)


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
        when, fix = "still being written in the background", (
            "wait for the new save to finish (its future's result(), or join its thread) before deleting the "
            "old one")
    elif folder(last) is not None:
        when, fix = "not yet complete", (
            "delete old checkpoints only after the new one is complete (with Accelerate's total_limit, rotate "
            "after save_state returns, or keep total_limit >= 2 and resume from the newest complete folder)")
    else:
        when, fix = "not yet complete", "delete the old file only after the new one is complete and in place"
    return Finding(
        "rotation-before-complete",
        f"the job deleted {name(place(last))} (step {last.step}), its newest complete checkpoint, while "
        f"checkpoint {interrupted.index} was {when}{left}: {fix}",
        {"deleted_step": last.step, "path": name(place(last)), "interrupted_save": interrupted.index},
    )


def chose_incomplete(interrupted: Optional[Save], completed: List[Save], deleted: List[Save], resume: RunLog,
                     error: Optional[str], name: Callable[[str], str], writing: Sequence[str] = ()) -> Optional[Finding]:
    """The resume took the interrupted (incomplete) checkpoint's folder, or one of its files (``writing``: those
    it had open when the fault struck), while a complete older one was there."""
    kept = [s for s in completed if s not in deleted]
    if interrupted is None or not kept:
        return None
    where = folder(interrupted)
    spots = [where] if where is not None else [f for f in files(interrupted, writing) if f not in files(kept[-1])]
    if not spots or place(kept[-1]) in spots:
        return None
    # a folder is taken when any of its files is read; a file, when a process read it last (a resume that tries
    # the newest file and falls back to the next that loads took the older one)
    touched = [e.get("path") for p in resume.processes for e in (p.loads if where is not None else p.loads[-1:])]
    chosen = next((s for s in spots for p in touched if p is not None and (p == s or p.startswith(s + os.sep))), None)
    if chosen is None and where is not None and error and (name(where) + os.sep in error or where + os.sep in error):
        chosen = where
    if chosen is None:
        return None
    older = f"{name(place(kept[-1]))} (step {kept[-1].step})"
    if where is not None and interrupted.path == where:  # a DCP folder: dcp.save writes .metadata last, on rank 0
        kind, advice = "resume-chose-dcp-without-metadata", (
            f"the resume took {name(where)}, a DCP folder the interrupted dcp.save left without .metadata, while "
            f"{older} was complete: resume from the newest folder holding .metadata")
    elif where is not None:
        kind, advice = "resume-chose-incomplete", (
            f"the resume took {name(where)}, which the interrupted checkpoint {interrupted.index} left incomplete, "
            f"while {older} was complete: resume from the newest checkpoint whose last "
            "file exists (for the Hugging Face Trainer, the newest checkpoint-N/ holding trainer_state.json, "
            "passed as resume_from_checkpoint=PATH instead of True)")
    else:
        kind, advice = "resume-chose-incomplete", (
            f"the resume took {name(chosen)}, which the interrupted checkpoint {interrupted.index} left incomplete, "
            f"while {older} was complete: resume from the newest file that loads, or write each checkpoint "
            "under a temporary name and rename it into place once it is complete, so no torn file ever bears a "
            "checkpoint's name")
    return Finding(kind, advice, {"path": name(chosen), "complete_step": kept[-1].step})


def interrupted_save(proc: ProcessLog) -> Optional[Save]:
    """The checkpoint the fault hit."""
    if proc.fault is None:
        return None
    found = [s for s in proc.saves if s.index == proc.fault.get("save")]
    return found[0] if found else None


def saved(proc: ProcessLog, before: Optional[float] = None) -> List[Save]:
    """The checkpoints ``proc`` saved: those it completed (begun by ``before``, when given) and the finished part of
    the one its fault interrupted (``good_part``)."""
    return proc.completed_saves(before=before) + good_part(interrupted_save(proc))


def good_part(interrupted: Optional[Save]) -> List[Save]:
    """What the interrupted checkpoint finished, when a file of it that holds a whole training state was finished
    before the fault (Lightning's ``epoch=E-step=N.ckpt`` before its ``last.ckpt``): that state is good. Its files
    are those its save calls finished; one the fault cut (a full disk's failed write) is not part of it."""
    if interrupted is None or interrupted.ok or not any(f.get("ok") and f.get("whole") for f in interrupted.files):
        return []
    cut = {f.get("path") for f in interrupted.files if not f.get("ok")}
    return [dataclasses.replace(interrupted, files=[f for f in interrupted.files if f.get("ok")],
                                moves=[m for m in interrupted.moves if m["src"] not in cut])]
