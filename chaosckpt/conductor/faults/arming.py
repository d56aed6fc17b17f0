"""What every fault kind arms with: from a trigger and the reference run's saves to the fault spec's save and place.

The reference run tells where save ``k`` is and how large it is, so that "half of
save 2" becomes a byte of the file that held it, and which directories hold checkpoints, so the
durability journal watches them in the faulted run.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Optional, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.faults.trigger import Trigger
from chaosckpt.conductor.runs.runlog import RunLog, Save
from chaosckpt.locations import location


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


def start(kind: protocol.AgentFaultKind, trigger: Trigger, reference: RunLog,
          track: Optional[List[str]]) -> Tuple[protocol.FaultSpec, Save]:
    """The spec of a fault of ``kind`` in save ``trigger.save`` of ``reference``'s saving process, before its
    placement, and that save as the reference made it."""
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    if not saves:
        raise NotArmable(NEVER_SAVED)
    if len(saves) < trigger.save:
        raise NotArmable(
            f"the uninterrupted run completed {len(saves)} checkpoint save(s) and the scenario needs save "
            f"{trigger.save}; use --param save=N with N <= {len(saves)}, or make the job save more often"
        )
    spec = protocol.fault_spec(kind, trigger.save, rank=saver.rank)
    if track is not None:
        spec["track"] = tracked(track)
    return spec, saves[trigger.save - 1]


def in_save(trigger: Trigger, target: Save) -> Dict:
    """Where in the save a fault fires: at a byte fraction or a write, of the whole save or of one of its files,
    and for a save the reference run wrote on a background thread, the step whose state it was handed and how
    many training steps after it the training is held while the fault strikes (default 0: at its next step)."""
    placed = _in_save(trigger, target)
    if target.thread is not None:
        placed["handed_step"] = target.step
    if trigger.steps_in_flight is not None:
        placed["steps_in_flight"] = trigger.steps_in_flight
    return placed


def _in_save(trigger: Trigger, target: Save) -> Dict:
    if trigger.file is not None:
        return placed_in_file(trigger, target)
    if trigger.write is not None:
        if trigger.write > target.writes:
            raise NotArmable(f"save {trigger.save} makes {target.writes} writes; --param write={trigger.write} is past its end")
        return {"at_write": trigger.write}
    at = min(int(target.bytes * trigger.fraction), max(target.bytes - 1, 0))
    if sum(target.sizes) != target.bytes or not target.bytes:
        return {"at_byte": at}
    return in_file(target.sizes, at)


IN_FILE_MARGIN = 4096
"""A fraction's byte is placed at least this far (or half the file, for a smaller one) before its file's end."""


def in_file(sizes: List[int], at: int) -> Dict[str, int]:
    """Byte ``at`` of a save whose files got ``sizes`` bytes (in the order they were written), as a place in one
    file: its number and a byte of it, at most ``IN_FILE_MARGIN`` (or half the file) from its start when ``at``
    lies nearer its end. Another run of the job may write a file a few bytes longer or shorter (a path of its own
    folder in it); counted this way, the same file is cut, never the end of the one before or past the end of one."""
    start = 0
    for index, size in enumerate(sizes, 1):
        if at < start + size:
            return {"file_index": index, "at_byte": min(at - start, max(size - IN_FILE_MARGIN, size // 2))}
        start += size
    raise ValueError(f"byte {at} is past the save's {start} bytes")


def tracked(roots: List[str]) -> List[str]:
    """The directories the journal watches: the checkpoint directories and the temporary one."""
    return [*roots, tempfile.gettempdir()]


def placed_in_file(trigger: Trigger, target: Save) -> Dict:
    """``at_byte`` / ``at_write`` counted in the checkpoint's file named ``trigger.file``: a file a save call wrote,
    or one of the files a DCP save wrote in its folder (its ``parts``: the shards, ``.metadata.tmp``)."""
    written = [{**part, "path": part["name"]} for f in target.files for part in f.get("parts", [])]
    written += [f for f in target.files if f.get("path") and "parts" not in f]
    files = [f for f in written if os.path.basename(f["path"]) == trigger.file]
    if not files:
        names = sorted({os.path.basename(f["path"]) for f in written})
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
    """Bytes each file of save number ``save`` got in the reference run (a DCP save's folder, and each file it wrote
    there), by its path relative to the job's working directory."""
    saver = reference.saver()
    saves = saver.completed_saves() if saver is not None else []
    if len(saves) < save:
        return {}
    cwd = (saver.hello or {}).get("cwd") or ""
    files = saves[save - 1].files
    written = [*((f["path"], f["bytes"]) for f in files if f.get("path") and f.get("bytes") is not None),
               *((os.path.join(f["path"], part["name"]), part["bytes"]) for f in files for part in f.get("parts", []))]
    return {os.path.relpath(path, cwd) if cwd else path: size for path, size in written}
