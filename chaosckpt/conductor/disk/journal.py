"""The job's durability journal as untrusted input.

The ``op`` events come from the job's own process, which can append anything to its events file. Before the
rebuild replays one, its fields must have the types and ranges the agent gives them (``malformed``), and the disk
refuses those that name a path it must not write (``crash.Disk.apply``); each event dropped either way is a
``Refusal``, and the trial reports them all in one ``journal-refused`` finding, which keeps it from passing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from chaosckpt.conductor.results.result import Finding

MAX_BYTES = 2**63 - 1
"""The largest size or offset a file can have (``off_t``): a larger one is forged."""

_PAIR, _INT, _BOOL, _PATH, _NAME = "pair", "int", "bool", "path", "name"
_FIELDS: Dict[str, Dict[str, Tuple[str, bool]]] = {  # op -> field -> (shape, required: never absent nor null)
    "open": {"path": (_PATH, True), "ino": (_PAIR, True), "created": (_BOOL, True), "trunc": (_BOOL, True),
             "size": (_INT, False), "keep": (_PATH, False)},
    "write": {"path": (_PATH, False), "ino": (_PAIR, True), "off": (_INT, True), "len": (_INT, True)},
    "fsync": {"path": (_PATH, False), "ino": (_PAIR, True), "size": (_INT, True)},
    "dirsync": {"path": (_PATH, False)},
    "rename": {"src": (_PATH, True), "dst": (_PATH, True), "ino": (_PAIR, False), "replaced": (_PAIR, False),
               "keep": (_PATH, False)},
    "link": {"src": (_PATH, False), "path": (_PATH, True), "ino": (_PAIR, True)},
    "unlink": {"path": (_PATH, True), "ino": (_PAIR, False), "keep": (_PATH, False)},
    "mkdir": {"path": (_PATH, True)},
    "rmdir": {"path": (_PATH, True)},
    "symlink": {"path": (_PATH, True), "target": (_NAME, True), "ino": (_PAIR, True)},
}
"""What the rebuild reads of each operation (``protocol``'s ``op`` event), as the agent writes it."""


@dataclass(frozen=True)
class Refusal:
    """One ``op`` event the rebuild did not replay, and why."""

    n: Optional[int]
    """Its number in its process's journal; None when it had none that could be read."""
    operation: str
    """The operation it names (``open``), empty when it names none the journal records."""
    path: Optional[str]
    why: str
    """Why, in words; ``{link}`` stands for ``link`` as the user knows it."""
    link: Optional[str] = None
    """The symbolic link the operation would have led the rebuild through."""

    def reason(self, name: Callable[[str], str]) -> str:
        """Why, with the link shown by ``name``."""
        return self.why if self.link is None else self.why.format(link=name(self.link))

    def describe(self, name: Callable[[str], str]) -> str:
        """``op 57 (open ckpt/../../x): its path ...``, paths shown by ``name``."""
        what = " ".join(p for p in (self.operation, None if self.path is None else name(self.path)) if p)
        return f"{'an op event' if self.n is None else f'op {self.n}'}{f' ({what})' if what else ''}: {self.reason(name)}"


def malformed(event: Dict[str, Any]) -> Optional[Refusal]:
    """Why the rebuild cannot read ``event``, an ``op`` event, as the agent writes one: a field missing, of
    another type, a size or an offset no file has, a path that is not absolute or not in its plain form
    (``/w/ckpt/../../x``); None when it can."""
    kind = event.get("op")
    n = event.get("n") if _is_int(event.get("n")) else None
    if kind not in _FIELDS:
        return Refusal(n, "", None, "it names no operation the journal records")
    if n is None or n < 1 or not _is_int(event.get("pid")) or not _is_number(event.get("ts")):
        return Refusal(None, kind, None, "its number, process or time is missing or not a number")
    for key, (shape, required) in _FIELDS[kind].items():
        value = event.get(key)
        if value is None:
            if required:
                return Refusal(n, kind, None, f"it has no {key}")
            continue
        why = _wrong(shape, value)
        if why is not None:
            return Refusal(n, kind, value if shape == _PATH and isinstance(value, str) else None, f"its {key} {why}")
    return None


def _wrong(shape: str, value: Any) -> Optional[str]:
    if shape == _PAIR:
        ok = isinstance(value, list) and len(value) == 2 and all(_is_int(v) and 0 <= v <= MAX_BYTES for v in value)
        return None if ok else "is not a device and inode number"
    if shape == _INT:
        return None if _is_int(value) and 0 <= value <= MAX_BYTES else f"is not a number of bytes from 0 to {MAX_BYTES}"
    if shape == _BOOL:
        return None if isinstance(value, bool) else "is not true or false"
    if not isinstance(value, str) or "\0" in value:
        return "is not a file name"
    if shape == _PATH and not os.path.isabs(value):
        return "is not an absolute path"
    if shape == _PATH and ".." in value.split(os.sep):
        return "climbs with .., which the agent never writes and chaosckpt never follows"
    if shape == _PATH and (os.path.normpath(value) != value or value.startswith("//")):
        return "is not in its plain form (a . or a doubled /), which the agent never writes"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float) and math.isfinite(value)


def finding(refusals: Sequence[Refusal], name: Callable[[str], str]) -> List[Finding]:
    """The ``journal-refused`` finding for the events the rebuild dropped, in the order of their numbers: the message
    names the first of each reason (three at most), the details name them all; none when it dropped none."""
    if not refusals:
        return []
    refusals = sorted(refusals, key=lambda r: (r.n is None, r.n or 0))
    count = len(refusals)
    firsts: List[Refusal] = []
    for refusal in refusals:
        if len(firsts) < 3 and all(refusal.why != first.why for first in firsts):
            firsts.append(refusal)
    listed = "; ".join(r.describe(name) for r in firsts)
    listed += f"; and {count - len(firsts)} more" if count > len(firsts) else ""
    return [Finding(
        "journal-refused",
        f"{count} operation{' was' if count == 1 else 's were'} refused and the disk rebuilt without "
        f"{'it' if count == 1 else 'them'}: {listed}. Replaying such an operation would write outside the "
        "checkpoint folders or through a symbolic link, or trust a field no agent writes; the job may have written "
        "its own events, so the trial cannot pass",
        {"refused": [{"op": r.n, "operation": r.operation, "path": None if r.path is None else name(r.path),
                      "why": r.reason(name)} for r in refusals]},
    )]
