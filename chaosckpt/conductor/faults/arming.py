"""From a scenario's trigger and the reference run's saves to the fault spec the agent arms.

The reference run tells where save ``k`` is and how large it is, so that "half of
save 2" becomes a byte offset, and which directories hold checkpoints, so the
durability journal watches them in the faulted run.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Optional

from chaosckpt.conductor.runs.runlog import RunLog, Save
from chaosckpt.conductor.scenario import Scenario, Trigger
from chaosckpt.locations import location

AGENT_KIND = {"kill": "halt", "enospc": "enospc", "power-loss": "halt", "eval-left-on": "halt"}


class NotArmable(Exception):
    """The reference run shows the fault can never fire (the job saves too rarely, the save is too short)."""


NEVER_SAVED = ("the job never saved a checkpoint in its reference run (the uninterrupted run), so no fault has a save "
               "to hit; check that it saves before it ends (its checkpoint interval against its steps, or --horizon "
               "stopping it first) and that it saves with torch.save, safetensors or DCP into a folder under --workdir")
"""Why no fault can be placed in a job whose reference run completed no save."""


def checkpoint_dirs(reference: RunLog, extra: List[str]) -> List[str]:
    """Directories the job saved checkpoints into, relative to its working directory, plus ``extra``."""
    found: List[str] = []
    for proc in reference.processes:
        cwd = (proc.hello or {}).get("cwd")
        for path in proc.paths():
            if cwd is None:
                continue
            rel = os.path.relpath(location(path), cwd)
            if not rel.startswith("..") and rel not in found:
                found.append(rel)
    for rel in extra:
        if rel not in found:
            found.append(rel)
    return found


def needs_journal(scenario: Scenario, sweep: bool) -> bool:
    return sweep or scenario.fault == "power-loss" or scenario.trigger.free_bytes is not None


def arm(scenario: Scenario, reference: RunLog, track: Optional[List[str]], sweep: bool = False) -> Dict:
    """The fault spec for ``CHAOSCKPT_FAULT``: which save, where in it, which directories to journal."""
    trigger = scenario.trigger
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    if not saves:
        raise NotArmable(NEVER_SAVED)
    if len(saves) < trigger.save:
        raise NotArmable(
            f"the uninterrupted run completed {len(saves)} checkpoint save(s) and the scenario needs save "
            f"{trigger.save}; use --param save=N with N <= {len(saves)}, or make the job save more often"
        )
    target = saves[trigger.save - 1]
    fault: Dict = {"kind": AGENT_KIND[scenario.fault], "save": trigger.save, "rank": saver.rank}
    if track is not None:
        fault["track"] = tracked(track)
    if sweep or scenario.fault == "eval-left-on" or scenario.fault == "power-loss" and trigger.op is None:
        fault["after_save"] = True
    elif scenario.fault == "power-loss":
        fault["at_op"] = trigger.op
    elif trigger.free_bytes is not None:
        fault["kind"] = "disk-full"
        fault["free_bytes"] = trigger.free_bytes
    elif trigger.file is not None:
        fault.update(placed_in_file(trigger, target))
    elif trigger.write is not None:
        if trigger.write > target.writes:
            raise NotArmable(f"save {trigger.save} makes {target.writes} writes; --param write={trigger.write} is past its end")
        fault["at_write"] = trigger.write
    else:
        fault["at_byte"] = min(int(target.bytes * trigger.fraction), max(target.bytes - 1, 0))
    return fault


def tracked(roots: List[str]) -> List[str]:
    """The directories the journal watches: the checkpoint directories and the temporary one."""
    return [*roots, tempfile.gettempdir()]


def placed_in_file(trigger: Trigger, target: Save) -> Dict:
    """``at_byte`` / ``at_write`` counted in the checkpoint's file named ``trigger.file``."""
    files = [f for f in target.files if f.get("path") and os.path.basename(f["path"]) == trigger.file]
    if not files:
        names = sorted({os.path.basename(f["path"]) for f in target.files if f.get("path")})
        raise NotArmable(f"--param file={trigger.file}: save {trigger.save} writes no file of that name "
                         f"(it writes {', '.join(names) or 'no named file'})")
    size, writes = files[0]["bytes"], files[0]["writes"]
    if trigger.write is not None:
        if trigger.write > writes:
            raise NotArmable(f"{trigger.file} in save {trigger.save} takes {writes} writes; "
                             f"--param write={trigger.write} is past its end")
        return {"file": trigger.file, "at_write": trigger.write}
    return {"file": trigger.file, "at_byte": min(int(size * trigger.fraction), max(size - 1, 0))}


def full_bytes(reference: RunLog, save: int) -> int:
    """Bytes save number ``save`` wrote in the reference run."""
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    return saves[save - 1].bytes if len(saves) >= save else 0


def file_bytes(reference: RunLog, save: int) -> Dict[str, int]:
    """Bytes each file of save number ``save`` got in the reference run, by its path relative to the job's
    working directory."""
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    if len(saves) < save:
        return {}
    cwd = (saver.hello or {}).get("cwd") or ""
    return {os.path.relpath(f["path"], cwd) if cwd else f["path"]: f["bytes"]
            for f in saves[save - 1].files if f.get("path") and f.get("bytes") is not None}


def resume_fault(scenario: Scenario) -> Optional[Dict]:
    """The fault armed in the resume run, for scenarios whose fault lies in how the job resumes."""
    if scenario.fault == "eval-left-on":
        return {"kind": "eval", "save": 1, "after_load": True}
    return None
