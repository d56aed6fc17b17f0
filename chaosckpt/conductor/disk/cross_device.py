"""A checkpoint file moved into place across file systems: the rename fails (EXDEV) and ``shutil.move`` falls
back to a copy, truncating the live checkpoint in place and writing into it, so a kill or a power loss during
the copy leaves it empty or torn.

Seen in a run when the job's temporary file lies on another file system than its checkpoint; foreseen when the
job moves a file in from its ``$TMPDIR``, which a trial keeps inside the sandbox, while the user's own
``$TMPDIR`` is on another file system than the working directory (a tmpfs ``/tmp``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import confinement
from chaosckpt.conductor.runs.runlog import ProcessLog

KIND = "move-became-copy"


def became_copy(proc: Optional[ProcessLog], workdir: Path) -> List[Finding]:
    """One ``move-became-copy`` finding per checkpoint file that a move rewrote in place, or would rewrite
    with the user's ``$TMPDIR``, from ``proc``'s ``save-move`` events (the reference run's: every move it made
    ran to its end)."""
    if proc is None:
        return []
    name = proc.shown

    user_tmp = tempfile.gettempdir()
    findings: Dict[str, Finding] = {}
    moved: set = set()
    for save in proc.saves:
        for move in save.moves:
            dst = move["dst"]
            existed = dst in moved
            moved.add(dst)
            if move["how"] != "move" or not move["ok"] or dst in findings:
                continue
            if move["copied"] and move["over"]:
                source = f"a move from {name(os.path.dirname(move['src']))}/, another file system"
            elif existed and _in_job_tmp(move["src"]) and _other_fs(user_tmp, workdir / name(os.path.dirname(dst))):
                source = (f"a move from $TMPDIR, which chaosckpt kept in the sandbox; yours, {user_tmp}, is on "
                          "another file system, so as you run the job it is")
            else:
                continue
            findings[dst] = _finding(name, dst, source, save.index, save.step, predicted=not move["copied"])
    return list(findings.values())


def _finding(name: Callable[[str], str], dst: str, source: str, save: int, step: int, predicted: bool) -> Finding:
    folder = name(os.path.dirname(dst)) or "."
    return Finding(
        KIND,
        f"{name(dst)} is replaced by {source}: the rename fails (EXDEV), so shutil.move truncates {name(dst)} in "
        "place and copies into it, and a kill or power loss during the copy leaves the live checkpoint empty or "
        "torn. Put the temporary file on the checkpoint's file system (Lightning and fsspec write it in $TMPDIR: "
        f"set TMPDIR to a folder on the same file system, such as one beside {folder}/), or save to a temporary "
        f"name in {folder}/ and os.replace() it over {os.path.basename(dst)}",
        {"path": name(dst), "save": save, "step": step, "predicted": predicted},
    )


def _in_job_tmp(path: str) -> bool:
    """Whether ``path`` lies in the temporary folder a trial gives the job."""
    folder = os.path.dirname(path)
    return folder == confinement.JOB_TMPDIR or folder.endswith(os.sep + str(confinement.TMP))


def _other_fs(tmp: str, folder: Path) -> bool:
    """Whether ``tmp`` is on another file system than ``folder`` (or its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.stat(tmp).st_dev != os.stat(folder).st_dev
    except OSError:
        return False
