"""A copy of the checkpoint (``shutil.copyfile(last, best)``) the fault left torn, though the resume never reads it.

The resume may be fine while the copy the user deploys or fine-tunes from is not: copied in place, it is torn
from the moment the copy begins until it ends. Whether a later save of the resumed run wrote it whole again is
said too.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from chaosckpt.conductor.results.result import FaultRecord, FileState, Finding
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial.context import rel

FIX = ("copy to a temporary name in the same folder, fsync it, then os.replace() it over {path} (or os.link() the "
       "finished checkpoint to a temporary name and os.replace() that over {path}), so the old copy stands until "
       "the new one is whole")


def copies_struck(proc: ProcessLog, work: Path) -> List[tuple]:
    """(copy, source) of every file the process copied into its checkpoints, the copy the fault caught it in
    included, by relative path."""
    inside = (proc.fault or {}).get("inside") or {}
    moves = [m for s in proc.saves for m in s.moves if m["how"] == "copy"]
    out: List[tuple] = []
    for move in [*moves, *([inside] if inside.get("how") == "copy" else [])]:
        pair = (rel(move["dst"], work), rel(move["src"], work))
        if pair not in out:
            out.append(pair)
    return out


def torn(state: FileState) -> bool:
    """Whether a file on disk lacks bytes it should hold, or does not load (a missing copy was removed, not torn)."""
    if state["bytes"] is None:
        return False
    return state["full_bytes"] is not None and state["bytes"] < state["full_bytes"] or state["loads"] is False


def rewritten_at(resumed: RunLog, path: str, work: Path, start: int) -> Optional[int]:
    """The global step of the resumed run's first completed checkpoint that wrote ``path`` whole again, if any
    (``start``: the step the resumed run started from)."""
    saver = resumed.saver()
    for save in saver.completed_saves() if saver is not None else []:
        if path in (rel(p, work) for p in [*save.paths(), *(m["dst"] for m in save.moves if m.get("ok"))]):
            return start + save.step
    return None


def finding(path: str, source: str, save: int, state: FileState, read: List[str],
            repaired: Optional[int]) -> Finding:
    """The ``torn-copy`` finding for ``path``, the copy of ``source`` that the fault in save ``save`` left as
    ``state``; ``read``: the files the resume loaded; ``repaired``: the step whose save wrote it whole again."""
    left = state["bytes"]
    size = f"{left} of its {state['full_bytes']} bytes" if state["full_bytes"] is not None else f"{left} bytes"
    loads = ", and it does not load" if state["loads"] is False else ""
    resumed_from = f"The resume loaded {', '.join(read)}, not it" if read else "The resume does not read it"
    after = (f"the resumed run's save at step {repaired} wrote it whole again" if repaired is not None else
             f"nothing rewrote it before the run ended, so whatever deploys or fine-tunes from {path} takes a torn file")
    return Finding(
        "torn-copy",
        f"{path}, copied from {source} straight into its final name, was left torn by the fault in save "
        f"{save}: {size}{loads}. {resumed_from}, so the resume was unaffected by it; {after}. "
        f"To fix it, {FIX.format(path=path)}",
        {"path": path, "copy_of": source, "save": save, "bytes": left, "full_bytes": state["full_bytes"],
         "loads": state["loads"], "repaired_step": repaired},
    )


def torn_copies(fault: FaultRecord, proc: ProcessLog, resumed: RunLog, work: Path, error_path: Optional[str],
                start: Optional[int]) -> List[Finding]:
    """A ``torn-copy`` finding for each copy the fault left torn that the resume did not read (one it read and
    tripped over is a torn checkpoint); ``start``: the step the resumed run started from (None: it crashed)."""
    states = fault.get("file_states") or {}
    trainer = resumed.trainer()
    read = [name for name in dict.fromkeys(rel(e.get("path"), work) for e in (trainer.loads if trainer else [])
                                           if e.get("ok")) if name is not None]
    out = []
    for path, source in copies_struck(proc, work):
        state = states.get(path)
        if state is None or not torn(state) or path == error_path or path in read:
            continue
        repaired = rewritten_at(resumed, path, work, start) if start is not None else None
        out.append(finding(path, source, fault["save"], state, read, repaired))
    return out
