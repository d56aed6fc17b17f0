"""What a trial will do with the working directory, said before the first run, and what it found there after.

The survey walks the working directory as ``sandbox.create`` will copy it, so the
line it prints (files, bytes, reflinks or not, what is bound or skipped, and the
cost per sandbox) is what happens. A stale checkpoint is one the reference run
loaded before any step from a file the user's working directory already held.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from chaosckpt.conductor.runs import confinement, diskspace, sandbox
from chaosckpt.conductor.runs.runlog import RunLog

KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}


@dataclass
class Survey:
    files: int = 0
    bytes: int = 0
    copied_bytes: int = 0
    bound: List[str] = field(default_factory=list)
    bound_bytes: int = 0
    skipped: List[str] = field(default_factory=list)
    reflinks: bool = False
    left_out: List[str] = field(default_factory=list)
    """Paths never copied: chaosckpt's and git's folders, the results folder, what ``--exclude`` names."""
    ignored: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    """Paths copied that git ignores (in a repository): files and bytes each; the data sets and environments
    that, at a repository's root, make most of a sandbox."""


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def survey(workdir: Path, exclude: Iterable[Path], dest_parent: Path) -> Survey:
    """What a sandbox copy of ``workdir`` made under ``dest_parent`` will hold."""
    workdir = workdir.resolve()
    skip = {Path(p).resolve() for p in exclude}
    dest_parent.mkdir(parents=True, exist_ok=True)
    out = Survey(reflinks=sandbox.reflinks(workdir, dest_parent))
    bind = confinement.available() and not out.reflinks
    for root, dirs, files in os.walk(workdir):
        here = Path(root)
        others = [d for d in dirs if sandbox.foreign(here / d)]
        out.skipped += [f"{os.path.relpath(here / d, workdir)} (a chaosckpt run in progress)" for d in others]
        out.left_out += [os.path.relpath(here / d, workdir) for d in dirs
                         if d in sandbox.ALWAYS_EXCLUDED or here / d in skip]
        dirs[:] = [d for d in dirs if d not in sandbox.ALWAYS_EXCLUDED and here / d not in skip and d not in others]
        for name in files:
            path = here / name
            if name in sandbox.ALWAYS_EXCLUDED or path in skip:
                out.left_out.append(os.path.relpath(path, workdir))
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            rel = os.path.relpath(path, workdir)
            if sandbox.special(st.st_mode):
                out.skipped.append(f"{rel} ({KINDS.get(stat.S_IFMT(st.st_mode), 'special file')})")
                continue
            out.files += 1
            if not stat.S_ISREG(st.st_mode):
                continue
            out.bytes += st.st_size
            if bind and st.st_size >= sandbox.LARGE_BYTES:
                out.bound.append(rel)
                out.bound_bytes += st.st_size
            else:
                out.copied_bytes += st.st_size
    out.ignored = _gitignored(workdir, out.left_out)
    return out


def _gitignored(workdir: Path, left_out: List[str]) -> Dict[str, Tuple[int, int]]:
    """What git ignores under ``workdir`` that the sandbox copies (nothing outside a repository or without git)."""
    git = shutil.which("git")
    if git is None:
        return {}
    try:
        listed = subprocess.run([git, "-C", str(workdir), "ls-files", "--others", "--ignored", "--exclude-standard",
                                 "--directory", "-z"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if listed.returncode != 0:
        return {}
    found: Dict[str, Tuple[int, int]] = {}
    for rel in sorted(os.fsdecode(raw).rstrip("/") for raw in listed.stdout.split(b"\0") if raw):
        if any(p in sandbox.ALWAYS_EXCLUDED for p in Path(rel).parts) or any(
                rel == out or rel.startswith(out + "/") for out in [*left_out, *found]):
            continue  # never copied, or inside a folder already counted
        found[rel] = _extent(workdir / rel)
    return found


def _extent(path: Path) -> Tuple[int, int]:
    """Files and bytes under ``path`` (the path itself when it is a file)."""
    if not path.is_dir():
        return 1, path.lstat().st_size if path.exists() or path.is_symlink() else 0
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
    return files, size


NOTABLE = (100, 64 << 20)
"""Gitignored files (count, bytes) worth a line of their own: a data set or an environment, not a cache file."""


def ignored_line(s: Survey) -> Optional[str]:
    """A line naming the gitignored paths the sandbox copies, with how to leave them out, when they are many."""
    files = sum(f for f, _ in s.ignored.values())
    size = sum(b for _, b in s.ignored.values())
    if files < NOTABLE[0] and size < NOTABLE[1]:
        return None
    big = sorted(s.ignored, key=lambda rel: -s.ignored[rel][1])[:3]
    shown = "; ".join(f"{rel}: {_count(s.ignored[rel][0], 'file')}, {_size(s.ignored[rel][1])}" for rel in big)
    options = " ".join(f"--exclude {rel}" for rel in big)
    return (f"every sandbox copies {_count(files, 'file')} ({_size(size)}) that git ignores ({shown}"
            f"{'; ...' if len(s.ignored) > 3 else ''}); if the job never reads them, leave them out: {options} "
            f"(config key exclude = {json.dumps(big)})")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def line(s: Survey, maps: Sequence[str]) -> str:
    """The preflight, in one line."""
    how = "cloned copy-on-write (reflinks)" if s.reflinks else f"copied ({_size(s.copied_bytes)} written per sandbox)"
    parts = [f"sandbox of {_count(s.files, 'file')}, {_size(s.bytes)}: {how}"]
    if s.bound:
        names = ", ".join(s.bound[:3]) + (", ..." if len(s.bound) > 3 else "")
        parts.append(f"{_count(len(s.bound), 'large input')} ({_size(s.bound_bytes)}: {names}) bound read-only, "
                     "not copied, since this file system has no reflinks")
    if s.skipped:
        parts.append(f"skipped {', '.join(s.skipped[:3])}{', ...' if len(s.skipped) > 3 else ''}: "
                     "FIFOs, sockets, devices and the results of chaosckpt runs in progress are never copied")
    if s.left_out:
        parts.append(f"left out: {', '.join(sorted(s.left_out)[:4])}{', ...' if len(s.left_out) > 4 else ''}")
    parts.append(confinement.note(maps))
    return "; ".join(parts)


def lines(workdir: Path, exclude: Iterable[Path], dest_parent: Path, maps: Sequence[Path]) -> List[str]:
    """What a trial's or a suite's first lines say of its sandboxes: ``line``, then ``ignored_line`` when it has
    something to say."""
    s = survey(workdir, exclude, dest_parent)
    return [line(s, [str(m) for m in maps]), *filter(None, [ignored_line(s)])]


def stale_checkpoint(reference: RunLog, workdir: Path) -> Optional[str]:
    """Why the reference run took no step, when it began by loading a checkpoint the working directory held."""
    for proc in reference.processes:
        cwd = (proc.hello or {}).get("cwd")
        loads = [e for e in proc.loads if e.get("ok") and e.get("path")]
        if not loads or cwd is None:
            continue
        rel = os.path.relpath(loads[0]["path"], cwd)
        if not rel.startswith("..") and (workdir / rel).exists():
            top = Path(rel).parts[0]
            return (f"the uninterrupted run began by loading {rel}, a checkpoint already in the working directory "
                    f"(left by an earlier training), so it resumed instead of training; leave it out of the sandbox "
                    f"with --exclude {top} (config key exclude = {json.dumps([top])})")
    return None


def needed(workdir: Path, reference: RunLog, reference_dir: Optional[Path], sandboxes: Path,
           exclude: Iterable[Path] = ()) -> int:
    """Bytes a trial's faulted and resume runs take: what one sandbox copy of the working directory writes
    (nothing where reflinks clone it; large inputs bound read-only are not copied: see ``preflight.survey``),
    twice the checkpoint files the reference left (the newest save to each path), and the reference's logs for
    each run."""
    copy = survey(workdir, exclude, sandboxes)
    saver = reference.saver()
    newest = {}
    for save in saver.completed_saves() if saver is not None else []:
        newest[save.path] = save.bytes
    logs = diskspace.tree_bytes(reference_dir) if reference_dir is not None and reference_dir.is_dir() else 0
    return (0 if copy.reflinks else copy.copied_bytes) + 2 * sum(newest.values()) + 2 * logs


def disk_fits(results_dir: Path, workdir: Path, exclude: Iterable[Path], reference: RunLog) -> Optional[str]:
    """Why the trial's runs would not fit on the results folder's disk, or None when they fit."""
    need = needed(workdir, reference, results_dir / "reference", results_dir / "sandboxes", [results_dir, *exclude])
    if diskspace.free_bytes(results_dir) < need:
        return diskspace.describe(results_dir, need, "the faulted and resume runs would not fit")
    return None
