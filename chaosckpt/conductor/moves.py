"""A checkpoint file moved into place across file systems: the rename fails (EXDEV) and ``shutil.move`` falls
back to a copy, truncating the live checkpoint in place and writing into it, so a kill or a power loss during
the copy leaves it empty or torn."""

from __future__ import annotations

import os
from typing import List, Optional

from chaosckpt.conductor.result import Finding
from chaosckpt.conductor.runlog import ProcessLog


def became_copy(proc: Optional[ProcessLog]) -> List[Finding]:
    """One ``move-became-copy`` finding per checkpoint file that a move rewrote in place, from ``proc``'s
    ``save-move`` events (the reference run's: every move it made ran to its end)."""
    if proc is None:
        return []
    cwd = (proc.hello or {}).get("cwd") or ""

    def name(path: str) -> str:
        return os.path.relpath(path, cwd) if cwd and path.startswith(cwd + os.sep) else path

    findings: List[Finding] = []
    seen = set()
    for save in proc.saves:
        for move in save.moves:
            dst = move["dst"]
            if move["how"] != "move" or not (move["copied"] and move["over"]) or dst in seen:
                continue
            seen.add(dst)
            folder = name(os.path.dirname(dst)) or "."
            findings.append(Finding(
                "move-became-copy",
                f"{name(dst)} was replaced by a move from {name(os.path.dirname(move['src']))}/, another file "
                f"system: the rename failed (EXDEV), so shutil.move truncated {name(dst)} in place and copied into "
                "it, and a kill or power loss during the copy leaves the live checkpoint empty or torn. Put the "
                "temporary file on the checkpoint's file system (Lightning and fsspec write it in $TMPDIR: set "
                f"TMPDIR to a folder on the same file system, such as one beside {folder}/), or save to a temporary "
                f"name in {folder}/ and os.replace() it over {os.path.basename(dst)}",
                {"path": name(dst), "source": name(move["src"]), "save": save.index, "step": save.step},
            ))
    return findings
