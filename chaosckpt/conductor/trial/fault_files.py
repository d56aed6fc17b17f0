"""The files a fault struck or its checkpoint touched, as the fault left them: size, the size they should have, and
whether they load.

A killed process sends no end event for the file it was still writing, nor for the copy it was inside; the fault
event names both (``writing``, ``inside``), so they are counted with the files its finished save calls wrote and
the names its renames put in place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

from chaosckpt.conductor.disk import loadcheck
from chaosckpt.conductor.disk.file_names import DCP_SHARD_SUFFIX
from chaosckpt.conductor.results.result import FileState
from chaosckpt.conductor.runs.runlog import ProcessLog
from chaosckpt.conductor.trial.context import Context, rel

NOT_A_CHECKPOINT = "neither a torch checkpoint"
"""How the load check starts its answer for a file in no checkpoint format it reads (JSON state): not judged."""


def fault_paths(proc: ProcessLog) -> List[str]:
    """Every file of the process's saves (those renames put in place too), then those the fault caught it writing
    or copying into, in order."""
    out = list(proc.paths())
    fault = proc.fault or {}
    inside = fault.get("inside") or {}
    renamed = [m["dst"] for s in proc.saves for m in s.moves if m.get("ok") and m["how"] != "copy"]
    for path in [*renamed, fault.get("path"), *fault.get("writing", []), inside.get("dst")]:
        if path is not None and path not in out:
            out.append(path)
    return out


def files_after_fault(ctx: Context, proc: ProcessLog, work: Path) -> Dict[str, Optional[int]]:
    """Size on disk (or null: missing) of every file of the fault (``fault_paths``), as the fault left them."""
    return {rel(path, work): os.path.getsize(host) if os.path.exists(host) else None
            for path, host in ((p, ctx.host_path(p, work)) for p in fault_paths(proc))}


def file_states(ctx: Context, proc: ProcessLog, work: Path, expected: Dict[str, int]) -> Dict[str, FileState]:
    """Each file of the fault (``fault_paths``) as the fault left it: its bytes (null: missing), those the
    uninterrupted run's same save gave it (``expected``, by relative path; a renamed or linked file's are its
    source's; null: unknown) and whether it loads (null: missing, a folder, a DCP data shard, or in no checkpoint
    format the load check reads)."""
    sources = {m["dst"]: m["src"] for s in proc.saves for m in s.moves if m.get("ok") and m["how"] != "copy"}
    states: Dict[str, FileState] = {}
    for path in fault_paths(proc):
        host = ctx.host_path(path, work)
        name = rel(path, work) or path
        full, source, followed = expected.get(name), path, {path}
        while full is None and sources.get(source) not in followed | {None}:  # a link to a renamed file: its source's
            source = sources[source]
            followed.add(source)
            full = expected.get(rel(source, work) or "")
        states[name] = {"bytes": os.path.getsize(host) if os.path.exists(host) else None, "full_bytes": full,
                        "loads": _loads(host) if os.path.isfile(host) else None}
    return states


def _loads(host: str) -> Optional[bool]:
    """Whether the file loads as a checkpoint; None for a DCP data shard, which nothing loads alone (its first
    tensor's record reads whole however much of the rest is lost: its bytes against ``full_bytes`` judge it), and
    for a file in no checkpoint format the load check reads."""
    if host.endswith(DCP_SHARD_SUFFIX):
        return None
    answer = loadcheck.check(host)
    if not answer["ok"] and answer["error"].startswith(NOT_A_CHECKPOINT):
        return None
    return bool(answer["ok"])
