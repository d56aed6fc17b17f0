"""``chaosckpt audit``: what checkpoint files and folders hold and what a resume from them would miss, without
loading them.

torch is imported only when the command runs, so the rest of the command line starts without it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import sys
from typing import Any, Dict, List, Optional, Sequence

import click

from chaosckpt.conductor.errors import ExitCode, UsageError, printable
from chaosckpt.conductor.results.envelope import envelope

KINDS = ("unreadable-checkpoint", "incomplete-checkpoint", "unsafe-pickle", "resource-limit", "pickled-objects",
         "checkpoint-view-bloat", "no-step-in-checkpoint", "rng-states-missing")
ALWAYS = {"unsafe-pickle": "a pickle that can run code when loaded is always reported",
          "resource-limit": "a file audit could not finish reading may hold anything, a pickle that runs code included"}
"""Kinds ``--ignore`` refuses, and why: ignoring them would let a hostile file pass."""
SHOWN_KEYS = 12

EPILOG = """\b
Exit codes:
  0  every file and folder is clean
  1  some file or folder has findings (unreadable, incomplete, unsafe, bloated,
     missing state)
  2  usage error (missing path, FIFO or socket given, bad option); one line on
     stderr
  3  internal error in chaosckpt (a crash report file is written)
"""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _details(contents: Dict[str, Any]) -> List[str]:
    from chaosckpt.checkpoint_content import human_bytes

    keys = sorted(contents["keys"], key=lambda k: -k["bytes"])
    shown = [f"{k['key']} {human_bytes(k['bytes'])} ({_plural(k['tensors'], 'tensor')})" if k["tensors"] else k["key"]
             for k in keys[:SHOWN_KEYS]]
    more = len(keys) + contents.get("keys_more", 0) - SHOWN_KEYS
    if more > 0:
        shown.append(f"and {more} more")
    rng = [f"{r['path']} ({r['kind']})" for r in contents["rng_states"]]
    progress = [f"{p['path']}={p['value'] if p['value'] is not None else '?'}" for p in contents["progress"]]
    lines = [f"keys: {', '.join(shown) or 'none'}", f"RNG states: {', '.join(rng) or 'none'}",
             f"step/epoch: {', '.join(progress) or 'none'}"]
    if contents["loader_states"]:
        lines.append(f"loader state: {', '.join(s['path'] for s in contents['loader_states'])}")
    return lines + _training_state(contents.get("training_state"))


def _training_state(held: Optional[Dict[str, List[str]]]) -> List[str]:
    """The lines that list what of a training state a checkpoint holds and lacks, as coverage lists missed lines."""
    if not held:
        return []
    lines = [f"training state held: {', '.join(held['holds']) or 'nothing'}"]
    if held["lacks"]:
        lines.append(f"training state lacked: {', '.join(held['lacks'])} (each costs a resume only where the job "
                     "has it; chaosckpt run shows which did)")
    return lines


def _render(report: Dict[str, Any]) -> List[str]:
    from chaosckpt.checkpoint_content import human_bytes

    name, findings, contents = report["path"], report["findings"], report["contents"]
    if any(f["kind"] == "resource-limit" for f in findings):
        head = f"FINDINGS {name}: not read to its end ({report['bytes']} bytes)"
    elif contents is None:
        head = f"FINDINGS {name}: unreadable ({report['bytes']} bytes)"
    else:
        count = len(contents["keys"]) + contents.get("keys_more", 0)
        summary = f"{_plural(count, 'key')}, {human_bytes(report['bytes'])} ({report['file_format']})"
        head = f"FINDINGS {name}: {summary}; {_plural(len(findings), 'finding')}" if findings else f"OK {name}: {summary}"
    lines = [head] + [f"  - {f['kind']}: {f['message']}" for f in findings]
    if contents is not None:
        lines += [f"  {line}" for line in _details(contents)]
    return lines


def _render_folder(report: Dict[str, Any]) -> List[str]:
    from chaosckpt.checkpoint_content import human_bytes

    files, findings = report["files"], report["findings"]
    flagged = findings + [{**f, "kind": f"{r['path']}: {f['kind']}"} for r in files for f in r["findings"]]
    state = ("complete" if report["complete"] else "incomplete") + (
        f", step {report['step']}" if report["step"] is not None else "")
    summary = f"{report['format']}, {state}, {_plural(len(files), 'file')}, {human_bytes(report['bytes'])}"
    name = report["path"].rstrip("/") + "/"
    head = f"FINDINGS {name}: {summary}; {_plural(len(flagged), 'finding')}" if flagged else f"OK {name}: {summary}"
    shown = [f"{r['path']} {human_bytes(r['bytes'])}" + ("" if r["status"] == "ok" else f" ({r['status']})")
             for r in files]
    by_file: Dict[str, List[str]] = {}
    for r in report["rng_states"]:
        by_file.setdefault(r["file"], []).append(f"{r['path']} ({r['kind']})")
    rng = [f"{f}: {', '.join(found)}" for f, found in by_file.items()]
    progress = [f"{p['file']}: {p['path']}={p['value'] if p['value'] is not None else '?'}" for p in report["progress"]]
    lines = [head] + [f"  - {f['kind']}: {f['message']}" for f in flagged]
    lines += [f"  files: {', '.join(shown) or 'none'}", f"  RNG states: {'; '.join(rng) or 'none'}",
              f"  step/epoch: {', '.join(progress) or 'none'}"]
    lines += [f"  {line}" for line in _training_state(report.get("training_state"))]
    return lines + [f"  note: {note}" for note in report["notes"]]


def _target_bytes(name: str, target: str) -> int:
    """The bytes of a file, or of the regular files under a folder (links not followed): what the limits scale by."""
    if target == "file":
        return os.stat(name).st_size
    total = 0
    for root, _, names in os.walk(name):
        for entry in names:
            with contextlib.suppress(OSError):
                info = os.lstat(os.path.join(root, entry))
                total += info.st_size if stat.S_ISREG(info.st_mode) else 0
    return total


def _stopped(name: str, target: str, size: int, limit: Any) -> Dict[str, Any]:
    """The report of a file or folder whose reading was stopped at a limit: one ``resource-limit`` finding."""
    finding = {"kind": "resource-limit", "limit": limit.which, "figure": limit.figure, "message": (
        f"audit stopped reading it at its {limit.which} limit ({limit.figure}): a pickle built to exhaust the "
        "reader (a hash or memory bomb), or more than the limits allow; nothing in it was judged, so do not "
        "torch.load it. Raise the limits with --max-seconds and --max-memory if you trust the file")}
    if target == "file":
        return {"path": name, "bytes": size, "file_format": None, "contents": None, "findings": [finding]}
    return {"path": name, "format": "checkpoint folder", "bytes": size, "complete": False, "step": None, "files": [],
            "rng_states": [], "progress": [], "findings": [finding], "notes": []}


def _without(report: Dict[str, Any], target: str, ignored: Sequence[str]) -> Dict[str, Any]:
    """``report`` with the ``--ignore``d kinds left out and each status (a folder's files', then its own) judged
    on what is left."""
    from chaosckpt.conductor.disk import checkpoint_folder

    for part in report["files"] if target == "folder" else []:
        part["findings"] = [f for f in part["findings"] if f["kind"] not in ignored]
        part["status"] = checkpoint_folder.status(part)
    report["findings"] = [f for f in report["findings"] if f["kind"] not in ignored]
    flagged = report["findings"] or any(p["findings"] for p in report.get("files", []) if target == "folder")
    report["status"] = "findings" if flagged else "ok"
    return report


def _target(name: str) -> str:
    """``file`` or ``folder``; a path that is neither is a usage error."""
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise UsageError(f"{name} is a symbolic link to nothing" if os.path.islink(name) else f"{name} does not exist")
    except OSError as exc:
        raise UsageError(f"{name} cannot be read ({exc.strerror}); give checkpoint files or folders") from None
    if stat.S_ISDIR(mode):
        return "folder"
    if not stat.S_ISREG(mode):
        raise UsageError(f"{name} is not a regular file (a FIFO, socket or device), so it is no checkpoint; "
                         "give checkpoint files or folders")
    return "file"


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(option: str, value: Optional[str]) -> Optional[int]:
    """A byte count such as ``4G`` or ``512M`` (powers of 1024), or None."""
    if value is None:
        return None
    text = value.strip().upper().removesuffix("IB").removesuffix("B")
    unit = text[-1:] if text[-1:] in _UNITS else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit() or int(number) == 0:
        raise UsageError(f"{option} {value} is invalid: give a size such as 4G, 512M or a number of bytes")
    return int(number) * _UNITS[unit]


def _boxed(reader, name: str, target: str, size: int, limits) -> Dict[str, Any]:
    """One file's or folder's report, read in a child under ``limits``; a stopped reader's report says which."""
    from chaosckpt.conductor.disk import box

    try:
        return box.run(reader, limits)
    except box.LimitReached as reached:
        return _stopped(name, target, size, reached)


def _check_options(ignored, max_seconds, streams) -> None:
    """The one-line usage error for a kind that cannot be ignored or is unknown, or a limit out of range."""
    for kind in ignored:
        if kind in ALWAYS:
            raise UsageError(f"--ignore {kind}: not allowed: {ALWAYS[kind]}")
        if kind not in KINDS:
            raise UsageError(f"--ignore {kind}: unknown finding kind; known kinds: "
                             f"{', '.join(k for k in KINDS if k not in ALWAYS)}")
    if max_seconds is not None and not 0 < max_seconds < float("inf"):
        raise UsageError(f"--max-seconds {max_seconds:g} is invalid: give a number of seconds > 0")
    if streams is not None and streams < 1:
        raise UsageError(f"--streams {streams} is invalid: give how many random streams the loop draws from (>= 1)")


@click.command("audit", epilog=EPILOG)
@click.argument("files", nargs=-1, required=True, metavar="PATH...")
@click.option("--streams", type=int, default=None, metavar="N",
              help="How many random streams the training loop draws from; fewer RNG states in a file is a finding.")
@click.option("--training", is_flag=True, default=None,
              help="The files are training checkpoints even without optimizer state: a missing step counter is a "
                   "finding, and what of a training state each holds and lacks is listed (by default only files "
                   "with optimizer state, and folders, are judged as training checkpoints).")
@click.option("--ignore", "ignored", multiple=True, metavar="KIND",
              help=f"Do not report findings of this kind (repeatable): {', '.join(KINDS)}.")
@click.option("--max-inflate", default=None, metavar="SIZE",
              help="Refuse to inflate any record past SIZE (e.g. 4G; default: 4x the file's size, 16M to 1G).")
@click.option("--max-seconds", type=float, default=None, metavar="SECONDS",
              help="Stop reading a file or folder after SECONDS of CPU or wall-clock time (default: 20, plus 1 per "
                   "50 MiB it holds): a resource-limit finding.")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Stop reading a file or folder once it takes SIZE more memory (e.g. 2G; default: 256M plus twice "
                   "its size, up to 2.25G): a resource-limit finding.")
@click.option("--json", "as_json", is_flag=True, help="Print only one JSON document on stdout.")
def command(files, streams, training, ignored, max_inflate, max_seconds, max_memory, as_json):
    """Inspect checkpoint files and folders without running anything from them.

    \b
    Examples:
      chaosckpt audit ckpt/last.pt
      chaosckpt audit ckpt/*.pt --streams 4
      chaosckpt audit out/checkpoint-500 ckpt/step_40
      chaosckpt audit model.pt --ignore no-step-in-checkpoint --json

    A folder (a Hugging Face Trainer checkpoint-N, an Accelerate checkpoint_N,
    a torch.distributed.checkpoint folder) is judged as one checkpoint (a
    folder holding only folders, as each of them): complete
    when every file in it loads, the file its framework writes last is there
    and, for DCP, .metadata names only shards that are there in full; its step
    and RNG states are read across all its files. Safetensors files are judged
    from their header. Reports files that cannot be loaded (torn by an interrupted save, damaged),
    pickles that would run code when loaded (os.system, subprocess...), tensors
    saved as views of much larger storages, the bytes under each top-level key,
    the RNG states present and the step/epoch counters (missing ones only in
    training checkpoints: files with optimizer state). The pickle is read with
    an allowlist: nothing in the file is imported or executed, and no tensor
    data is loaded into memory. Each file or folder is read in a child
    process under CPU, memory and time limits.
    """
    _check_options(ignored, max_seconds, streams)
    targets = [_target(name) for name in files]
    limit = _size("--max-inflate", max_inflate)
    memory = _size("--max-memory", max_memory)
    from chaosckpt.conductor.disk import checkpoint_folder  # import torch: only when auditing, so other commands start fast
    from chaosckpt.conductor.disk import audit, box

    reports, folders = [], []
    expanded = [(name, target) for given, target in zip(files, targets)
                for name in (checkpoint_folder.checkpoints_in(given) if target == "folder" else [given])]
    for name, target in expanded:
        size = _target_bytes(name, target)
        reader = (functools.partial(checkpoint_folder.audit_folder, name, streams=streams, max_inflate=limit,
                                    training=training) if target == "folder" else
                  functools.partial(audit.audit_file, name, streams=streams, max_inflate=limit, training=training))
        report = _without(_boxed(reader, name, target, size, box.Limits.for_size(size, max_seconds, memory)),
                          target, ignored)
        (folders if target == "folder" else reports).append(report)
        lines = _render_folder(report) if target == "folder" else _render(report)
        if not as_json:
            for line in lines:
                click.echo(printable(line))
    if as_json:
        click.echo(json.dumps(envelope(files=reports, checkpoints=folders)))
    sys.exit(int(ExitCode.FAILED if any(r["status"] != "ok" for r in reports + folders) else ExitCode.PASSED))
