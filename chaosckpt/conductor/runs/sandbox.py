"""Private copies of the user's working directory, so no run ever writes the user's files.

Files are cloned with copy-on-write reflinks where the filesystem has them and
copied otherwise, except large inputs, which the run's namespace binds read-only;
never hard-linked, since a write through a hard link would reach the user's
file. Symbolic links are copied as links; FIFOs, sockets and devices are skipped.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.runs import confinement, leftovers

FICLONE = 0x40049409
ALWAYS_EXCLUDED = (".git", "__pycache__", ".chaosckpt")
LARGE_BYTES = 64 << 20
"""Files this big are bound read-only into the sandbox, not copied, where reflinks are not available."""
"""In a sandbox's layers: ``{relative path: real file}`` of the large inputs bound read-only."""


def special(mode: int) -> bool:
    """FIFOs, sockets and device files: opening one can block or fail, so they are never copied."""
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def foreign(path: Path) -> bool:
    """A results folder of another chaosckpt run in progress (it holds its lock file): not the job's files, and
    its sandboxes come and go while it runs."""
    return (path / leftovers.LOCK).is_file() and not path.is_symlink()


def _vanished(errors: List[tuple]) -> bool:
    """Whether every error of a copy is a file that disappeared while it was copied (changed by another process)."""
    return all(not os.path.lexists(src) for src, *_ in errors)


@functools.lru_cache(maxsize=None)
def _reflinks_between(src_dev: int, dst_dev: int, src: str, dst: str) -> bool:
    try:
        with tempfile.NamedTemporaryFile(dir=src) as a, tempfile.NamedTemporaryFile(dir=dst) as b:
            a.write(b"x")
            a.flush()
            fcntl.ioctl(b.fileno(), FICLONE, a.fileno())
        return True
    except OSError:
        return False


def reflinks(src: Path, dst: Path) -> bool:
    """Whether files under ``src`` can be cloned copy-on-write into ``dst`` (both existing folders)."""
    return _reflinks_between(os.stat(src).st_dev, os.stat(dst).st_dev, str(src), str(dst))


def _clone_or_copy(src: str, dst: str) -> str:
    """Reflink ``src`` to ``dst`` when possible, else copy it; metadata follows either way."""
    try:
        with open(src, "rb") as fsrc, open(dst, "wb") as fdst:
            fcntl.ioctl(fdst.fileno(), FICLONE, fsrc.fileno())
        shutil.copystat(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def create(workdir: Path, dest: Path, exclude: Iterable[Path] = (), bind_large: Optional[bool] = None) -> Path:
    """Copy ``workdir`` to ``dest`` (which must not exist), leaving out ``exclude``, tool folders and special files.

    Where reflinks are not available and the job runs in a namespace (``bind_large``, decided here when None),
    files of ``LARGE_BYTES`` or more get an empty stand-in that the namespace covers with the real file, read-only.
    """
    workdir = workdir.resolve()
    skip: List[Path] = [Path(p).resolve() for p in exclude]
    skip.append(dest.resolve())
    dest.parent.mkdir(parents=True, exist_ok=True)
    clone = reflinks(workdir, dest.parent)
    if bind_large is None:
        bind_large = confinement.available() and not clone
    inherited = confinement.bound_inputs(workdir)
    bound: Dict[str, str] = {}

    def ignore(directory: str, names: List[str]) -> List[str]:
        here = Path(directory).resolve()
        return [n for n in names if n in ALWAYS_EXCLUDED or here / n in skip or _not_copied(here / n)]

    def copy(src: str, dst: str) -> str:
        rel = os.path.relpath(src, workdir)
        if rel in inherited or bind_large and os.path.getsize(src) >= LARGE_BYTES:
            open(dst, "wb").close()
            bound[rel] = inherited.get(rel, src)
            return dst
        return _clone_or_copy(src, dst) if clone else shutil.copy2(src, dst)

    try:
        shutil.copytree(workdir, dest, symlinks=True, ignore=ignore, copy_function=copy)
    except shutil.Error as err:
        if not _vanished(err.args[0]):
            raise
    if bound:
        confinement.layers(dest).mkdir(exist_ok=True)
        (confinement.layers(dest) / confinement.INPUTS).write_text(json.dumps(bound, indent=2) + "\n")
    return dest


def _not_copied(path: Path) -> bool:
    try:
        return special(os.lstat(path).st_mode) or foreign(path)
    except FileNotFoundError:
        return True


def links_out(workdir: Path) -> List[str]:
    """Symbolic links under ``workdir`` that point outside it: writes through them would leave the sandbox."""
    workdir = workdir.resolve()
    found = []
    for root, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in ALWAYS_EXCLUDED and not foreign(Path(root, d))]
        for name in dirs + files:
            path = Path(root, name)
            if path.is_symlink():
                target = path.resolve()
                if workdir not in target.parents and target != workdir:
                    found.append(str(path.relative_to(workdir)))
    return found


def remove(path: Path) -> None:
    """Remove a sandbox (or a folder of them) and the overlay layers beside it, restartably (``leftovers.discard``)."""
    leftovers.discard(path, confinement.layers(path))


def _linked_folders(workdir: Path) -> List[str]:
    """Folders outside ``workdir`` that symbolic links under it lead to: mapped without being asked."""
    found = []
    for rel in links_out(workdir):
        target = os.path.realpath(workdir / rel)
        folder = target if os.path.isdir(target) else os.path.dirname(target)
        if os.path.isdir(folder) and folder not in found:
            found.append(folder)
    return found


def maps(workdir: Path, given: Sequence[Path], results: Path) -> List[str]:
    """Every folder to overlay: those given (``--map``), those the working directory's links lead to, and caches."""
    out: List[str] = []
    for raw in given:
        folder = os.path.realpath(raw)
        if not os.path.isdir(folder):
            raise UsageError(f"--map {raw}: no such directory; map a directory the job writes into (it must exist)")
        for holder, name in ((workdir, "the working directory"), (results, "the results folder")):
            if confinement.inside(str(holder), Path(folder)):
                raise UsageError(f"--map {raw} contains {name} {holder}; map only the folder the job writes into, "
                                 "such as --map /scratch/me/ckpt")
        if confinement.inside(folder, workdir):
            raise UsageError(f"--map {raw} is inside the working directory, whose writes already stay in the sandbox")
        out.append(folder)
    caches = [os.path.realpath(os.path.expanduser(c)) for c in confinement.CACHES]
    for folder in _linked_folders(workdir) + [c for c in caches if os.path.isdir(c)]:
        if folder not in out and not confinement.inside(str(workdir), Path(folder)) and not confinement.inside(str(results), Path(folder)):
            out.append(folder)
    return out
