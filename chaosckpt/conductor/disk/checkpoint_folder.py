"""A checkpoint folder judged as a whole: a Hugging Face Trainer ``checkpoint-N/``, an Accelerate
``checkpoint_N/``, a torch.distributed.checkpoint folder, or any folder of checkpoint files.

Complete means every checkpoint file in it loads (audit's reader decides, for torch files, pickles and
safetensors headers alike), JSON state parses, the file its framework writes last is there, and for DCP
``.metadata`` names only shards that are there and long enough. The state is read across all files:
step counters in any of them (``trainer_state.json``'s ``global_step``, a DCP ``step``), RNG streams in
any of them (``rng_state.pth``, ``random_states_0.pkl``, a DCP item). The walk never follows a link to a
folder, never opens anything but a regular file, and stops after ``MAX_ENTRIES`` entries: a FIFO, socket,
link loop or unreadable entry is one note or one finding, never a hang. A folder that holds only folders
(``out/`` with ``checkpoint-4/`` and ``checkpoint-8/``) is the checkpoints in it, each judged on its own.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from chaosckpt import checkpoint_content
from chaosckpt.conductor.disk import audit, dcp_folder, file_names
from chaosckpt.conductor.disk.file_names import CHECKPOINT_SUFFIXES, DCP_METADATA, DCP_SHARD_SUFFIX

JSON_LIMIT = 16 << 20
MAX_ENTRIES = 10_000
MAX_DEPTH = 8

TRAINER, ACCELERATE, DCP, FILES = ("Hugging Face Trainer checkpoint", "Accelerate checkpoint",
                                   "torch.distributed.checkpoint folder", "checkpoint folder")
_LAST_FILE = {
    TRAINER: (re.compile(r"trainer_state\.json"), "trainer_state.json", "the Trainer writes it last"),
    ACCELERATE: (re.compile(r"random_states_\d+\.pkl"), "random_states_0.pkl",
                 "Accelerate's save_state writes it after the model, optimizer and scheduler"),
}
_REFERENCE_ONLY = {"training_args.bin": "the Trainer's arguments, kept for reference: the Trainer does not load them "
                                        "when it resumes"}
"""Framework files whose pickled objects are no finding, and why."""


def _kind(folder: str, names: Sequence[str]) -> str:
    """Which framework wrote the folder, from the names of the files directly in it."""
    base = os.path.basename(os.path.normpath(folder))
    if DCP_METADATA in names or any(n.endswith(DCP_SHARD_SUFFIX) for n in names):
        return DCP
    if {"trainer_state.json", "training_args.bin", "scheduler.pt"} & set(names) \
            or any(re.fullmatch(r"rng_state(_\d+)?\.pth", n) for n in names) or re.fullmatch(r"checkpoint-\d+", base):
        return TRAINER
    if {"optimizer.bin", "scheduler.bin"} & set(names) or any(re.fullmatch(r"(random_states|custom_checkpoint)_\d+\.pkl", n)
                                                             for n in names) or re.fullmatch(r"checkpoint_\d+", base):
        return ACCELERATE
    return FILES


def _what(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


class _Walk:
    """The regular files under a folder (links to files followed, links to folders not), with notes on the rest."""

    def __init__(self, root: str) -> None:
        self.files: Dict[str, int] = {}
        self.notes: List[str] = []
        self.unlisted: List[Tuple[str, str]] = []
        seen = 0
        stack = [("", 0)]
        while stack:
            rel, depth = stack.pop()
            try:
                with os.scandir(os.path.join(root, rel) if rel else root) as entries:
                    listed = sorted(itertools.islice(entries, MAX_ENTRIES - seen + 1), key=lambda e: e.name)
            except OSError as exc:
                self.unlisted.append((rel or ".", exc.strerror or str(exc)))
                continue
            for entry in listed:
                name = os.path.join(rel, entry.name) if rel else entry.name
                seen += 1
                if seen > MAX_ENTRIES:
                    self.notes.append(f"more than {MAX_ENTRIES} entries: the rest is not judged")
                    return
                self._entry(entry, name, depth, stack)

    def _entry(self, entry: os.DirEntry, name: str, depth: int, stack: List[Tuple[str, int]]) -> None:
        try:
            if entry.is_symlink():
                try:
                    target = os.stat(entry.path)
                except OSError as exc:
                    self.notes.append(f"{name}: a symbolic link that leads nowhere ({exc.strerror}): not read")
                    return
                if stat.S_ISREG(target.st_mode):
                    self.files[name] = target.st_size
                else:
                    self.notes.append(f"{name}: a symbolic link to {_what(target.st_mode)}: not followed")
                return
            mode = entry.stat(follow_symlinks=False)
        except OSError as exc:
            self.notes.append(f"{name}: cannot look at it ({exc.strerror}): not read")
            return
        if stat.S_ISDIR(mode.st_mode):
            if depth + 1 > MAX_DEPTH:
                self.notes.append(f"{name}/: more than {MAX_DEPTH} folders deep: not judged")
            else:
                stack.append((name, depth + 1))
        elif stat.S_ISREG(mode.st_mode):
            self.files[name] = mode.st_size
        else:
            self.notes.append(f"{name}: {_what(mode.st_mode)}, not a file: not read")


def _json_file(path: str, name: str, size: int) -> Dict[str, Any]:
    """A JSON state file (``trainer_state.json``): it must parse; its counters are part of the checkpoint."""
    report: Dict[str, Any] = {"path": name, "bytes": size, "file_format": "JSON", "contents": None, "findings": []}
    if size > JSON_LIMIT:
        return report
    try:
        with audit.open_regular(path) as handle:
            obj = json.loads(handle.read(JSON_LIMIT + 1).decode("utf-8"))
    except (OSError, audit.AuditError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0] if str(exc) else "empty"
        error = f"not valid JSON ({why}): torn or damaged" if not isinstance(exc, OSError) else f"cannot read it: {why}"
        report["file_format"] = None
        report["findings"] = [{"kind": "unreadable-checkpoint", "message": f"cannot be loaded: {error}", "error": error}]
        return report
    report["contents"] = checkpoint_content.scan(obj)
    return report


def _sniffed(path: str) -> bool:
    """Whether a file of another name starts as a torch file, pickle or safetensors file does."""
    try:
        with audit.open_regular(path) as handle:
            head = handle.read(9)
    except (OSError, audit.AuditError):
        return False
    return head[:2] == b"PK" or head[:1] == b"\x80" or audit.is_safetensors(path, head)


def _file(root: str, name: str, size: int, max_inflate: Optional[int]) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """One file of the folder: its report (None when it is no checkpoint format) and notes."""
    path = os.path.join(root, name)
    if name.endswith(".json"):
        return _json_file(path, name, size), []
    if not name.endswith(CHECKPOINT_SUFFIXES) and not _sniffed(path):
        return None, [f"{name}: not a checkpoint format: not judged"]
    report = audit.audit_file(path, max_inflate=max_inflate, training=False, shown=name)
    why = _REFERENCE_ONLY.get(os.path.basename(name))
    notes = []
    if why:
        objects = [f for f in report["findings"] if f["kind"] == "pickled-objects"]
        report["findings"] = [f for f in report["findings"] if f["kind"] != "pickled-objects"]
        notes = [f"{name}: pickles {', '.join(f['names'][:2])}{' and more' if len(f['names']) > 2 else ''}; {why}"
                 for f in objects]
    return report, notes


def _orphans(files: List[Dict[str, Any]]) -> List[str]:
    """Temporary files beside whole checkpoints that a save interrupted before its rename left unreadable: the
    checkpoints they would have replaced stand, so each is a note (status ``orphaned``), not a torn checkpoint."""
    orphaned = [r for r in files if r["status"] == "unreadable" and file_names.is_temporary(r["path"])]
    if not orphaned or not any(r["status"] != "unreadable" for r in files if r not in orphaned):
        return []
    notes = []
    for report in orphaned:
        report["status"], report["findings"] = "orphaned", []
        notes.append(f"{report['path']} is an orphaned temporary file ({report['bytes']} bytes that do not load): "
                     "what a save interrupted before its rename leaves; the checkpoints beside it are whole, and it "
                     "can be deleted")
    return notes


def status(report: Dict[str, Any]) -> str:
    """A file's status in its folder: ``unreadable`` (torn, damaged, cannot be read), ``findings`` or ``ok``;
    ``orphaned`` stays (set by ``_orphans``: an unreadable temporary file beside whole checkpoints)."""
    if report.get("status") == "orphaned":
        return "orphaned"
    if any(f["kind"] == "unreadable-checkpoint" for f in report["findings"]):
        return "unreadable"
    return "findings" if report["findings"] else "ok"


def _judge_files(root: str, by_dir: Dict[str, Dict[str, int]], max_inflate: Optional[int]) -> Tuple[
        List[Dict[str, Any]], List[Dict[str, Any]], List[str], List[Tuple[str, Dict[str, Any]]]]:
    """Every file of the folder judged (DCP folders in it as such): file reports, findings about DCP folders,
    notes, and what each readable file (or DCP state) holds, by file name."""
    files: List[Dict[str, Any]] = []
    findings: List[Dict[str, Any]] = []
    notes: List[str] = []
    states: List[Tuple[str, Dict[str, Any]]] = []
    for rel, names in sorted(by_dir.items()):
        prefix = rel + os.sep if rel else ""
        if DCP_METADATA in names or any(n.endswith(DCP_SHARD_SUFFIX) for n in names):
            judged = dcp_folder.judge(os.path.join(root, rel), prefix, names, max_inflate)
            files += judged["files"]
            findings += judged["findings"]
            notes += judged["notes"]
            if judged["state"] is not None:
                states.append((prefix + DCP_METADATA, checkpoint_content.scan(judged["state"])))
            names = {n: s for n, s in names.items()
                     if n != DCP_METADATA and not n.endswith(DCP_SHARD_SUFFIX)}
        for name, size in sorted(names.items()):
            report, told = _file(root, prefix + name, size, max_inflate)
            notes += told
            if report is not None:
                files.append(report)
                if report["contents"] is not None:
                    states.append((report["path"], report["contents"]))
    return files, findings, notes, states


def audit_folder(folder: Union[str, Path], *, streams: Union[int, Sequence[str], None] = None,
                 max_inflate: Optional[int] = None, training: Optional[bool] = None) -> Dict[str, Any]:
    """Judge a checkpoint folder as a whole: ``{"path", "format", "bytes", "complete", "step", "files",
    "rng_states", "progress", "findings", "notes", "status"}``, and ``training_state`` (what of a training state
    the complete checkpoint holds and lacks) unless ``training`` is False. ``files`` are per-file reports as
    :func:`audit.audit_file` makes them (paths relative to the folder), each with a ``status``; ``findings``
    are about the checkpoint as a whole (incomplete, no step counter, missing RNG states)."""
    root = str(folder)
    held: Optional[Dict[str, List[str]]] = None
    walk = _Walk(root)
    by_dir: Dict[str, Dict[str, int]] = {}
    for name, size in walk.files.items():
        by_dir.setdefault(os.path.dirname(name), {})[os.path.basename(name)] = size
    kind = _kind(root, list(by_dir.get("", {})))
    files, findings, notes, states = _judge_files(root, by_dir, max_inflate)
    notes = walk.notes + notes
    for rel, why in walk.unlisted:
        findings.append({"kind": "unreadable-checkpoint", "message": f"{rel}/ cannot be listed ({why}): its files are "
                         "not judged", "error": why, "file": rel})
    findings += _missing(kind, list(by_dir.get("", {})), files, root)
    for report in files:
        report["status"] = status(report)
    notes += _orphans(files)
    rng = [{"file": f, **r} for f, c in states for r in c["rng_states"]]
    progress = [{"file": f, **p} for f, c in states for p in c["progress"]]
    steps = [p["value"] for p in progress if "step" in p["name"].lower() and p["value"] is not None]
    complete = not walk.unlisted and all(r["status"] != "unreadable" for r in files) \
        and not any(f["kind"] == "incomplete-checkpoint" for f in findings)
    if complete and states:
        whole = checkpoint_content.merge([{**c, "bloat": [], "keys": []} for _, c in states])
        findings += checkpoint_content.findings(whole, streams=streams, training=training)
        held = checkpoint_content.training_state(whole) if training is not False else None
    elif not complete:
        notes.append("step and RNG states are not judged in an incomplete checkpoint: what is missing may hold them")
    flagged = findings or any(r["findings"] for r in files)
    return {"path": root, "format": kind, "bytes": sum(walk.files.values()), "complete": complete,
            "step": max(steps) if steps else None, "files": files, "rng_states": rng, "progress": progress,
            "findings": findings, "notes": notes, "status": "findings" if flagged else "ok",
            **({"training_state": held} if held else {})}


def checkpoints_in(folder: Union[str, Path]) -> List[str]:
    """The checkpoints a folder given to ``audit`` stands for: itself, or, when it holds folders and no file,
    each folder in it (in numeric order: ``checkpoint-4`` before ``checkpoint-12``)."""
    root = str(folder)
    try:
        with os.scandir(root) as entries:
            listed = list(itertools.islice(entries, MAX_ENTRIES + 1))
        folders = [e.name for e in listed if e.is_dir(follow_symlinks=False)]
        if not folders or any(not e.is_dir(follow_symlinks=False) for e in listed):
            return [root]
    except OSError:
        return [root]  # audit_folder says why it cannot be listed

    def order(name: str) -> Tuple[str, int, str]:
        number = re.search(r"(\d+)$", name)
        return (name[:number.start()] if number else name, int(number.group(1)) if number else -1, name)

    return [os.path.join(root, name) for name in sorted(folders, key=order)]


def _missing(kind: str, top: List[str], files: List[Dict[str, Any]], root: str) -> List[Dict[str, Any]]:
    """``incomplete-checkpoint`` when the file the framework writes last is not there, or nothing is judged."""
    if not files and kind != DCP:
        return [{"kind": "incomplete-checkpoint", "message": f"{root} holds no checkpoint file", "missing": []}]
    if kind not in _LAST_FILE:
        return []
    pattern, name, why = _LAST_FILE[kind]
    if any(pattern.fullmatch(n) for n in top):
        return []
    return [{"kind": "incomplete-checkpoint", "missing": [name], "message": (
        f"no {name}: {why}, so the save that made this folder never finished; resume from an older complete "
        "checkpoint")}]
