"""Copies of a checkpoint (``shutil.copyfile(checkpoint, model_best)``) that a power loss took with it.

A copy written after the save returned is as acknowledged as the checkpoint itself: the job moved
on believing both were on disk. It is judged the same way, by the fsync it lacked.
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional

from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs.runlog import Save


def final_path(save: Save, ops: List[dict]) -> Optional[str]:
    """Where the save's file ended up: its path, followed through the renames after the save began."""
    return _followed(save.path, save, ops)


def final_paths(save: Save, ops: List[dict]) -> List[str]:
    """Where every file of the checkpoint ended up: those its save calls wrote and those moved in from a
    temporary file, each followed through the renames after the save began, then the names it linked to them."""
    out: List[str] = []
    links = [m["dst"] for m in save.moves if m["how"] == "link" and m.get("ok")]
    for path in save.paths():
        final = _followed(path, save, ops)
        if final is not None and final not in out:
            out.append(final)
    return out + [link for link in links if link not in out]


def _followed(path: Optional[str], save: Save, ops: List[dict]) -> Optional[str]:
    for op in ops:
        if op["op"] == "rename" and op["src"] == path and op["ts"] >= save.ts:
            path = op["dst"]
    return path


def lost(save: Save, ops: List[dict], disk: "crash.Disk", model: str, name: Callable[[str], str]) -> List[Finding]:
    """One ``acknowledged-checkpoint-lost`` finding per copy of ``save``'s file that did not survive the crash.

    A copy is a file, other than the checkpoint, written after the save began and as long as the checkpoint; a hard
    link to it (the same inode) is one too, named as the link it is."""
    path = final_path(save, ops)
    key = disk.names.get(path) if path else None
    if key is None:
        return []
    size = disk.inodes[key].size
    written = {tuple(op["ino"]) for op in ops if op["op"] == "write" and op["ts"] >= save.ts}
    findings = []
    for other, other_key in sorted(disk.names.items()):
        if other == path or other_key not in written or disk.inodes[other_key].size != size:
            continue
        why = crash.missing_durability(disk, other, model, name)
        if why is not None:
            findings.append(_linked(save, path, other, model, why, name) if other_key == key else Finding(
                "acknowledged-checkpoint-lost",
                f"{name(other)}, the copy of the checkpoint of step {save.step} ({name(path)}), was written after "
                f"the save but did not survive the power loss under the {model} model: {why}; fsync the copy "
                "(open it, os.fsync, close) before the job moves on",
                {"path": name(other), "copy_of": name(path), "step": save.step, "model": model, "missing": why},
            ))
    return findings


def _linked(save: Save, path: str, link: str, model: str, why: str, name: Callable[[str], str]) -> Finding:
    """A hard link to the checkpoint (``os.link``) that the power loss took: the same file under a second name,
    so the fix is the checkpoint's own fsync and its folder's after the link, never a copy's."""
    folder = name(os.path.dirname(link))
    return Finding(
        "acknowledged-checkpoint-lost",
        f"{name(link)}, a hard link to the checkpoint of step {save.step} ({name(path)}) made after the save, did "
        f"not survive the power loss under the {model} model: {why}; a hard link is the same file under another "
        f"name, not a copy, so there is no copy to fsync: fsync {name(path)} before os.link() and its folder "
        f"{folder}/ after it, before the job moves on",
        {"path": name(link), "link_of": name(path), "step": save.step, "model": model, "missing": why},
    )
