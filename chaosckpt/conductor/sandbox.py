"""Private copies of the user's working directory, so no run ever writes the user's files.

Files are cloned with copy-on-write reflinks where the filesystem has them and
copied otherwise; never hard-linked, since a write through a hard link would
reach the user's file. Symbolic links are copied as links.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Iterable, List

FICLONE = 0x40049409
ALWAYS_EXCLUDED = (".git", "__pycache__", ".chaosckpt")


def _clone_or_copy(src: str, dst: str) -> str:
    """Reflink ``src`` to ``dst`` when possible, else copy it; metadata follows either way."""
    try:
        with open(src, "rb") as fsrc, open(dst, "wb") as fdst:
            fcntl.ioctl(fdst.fileno(), FICLONE, fsrc.fileno())
        shutil.copystat(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def create(workdir: Path, dest: Path, exclude: Iterable[Path] = ()) -> Path:
    """Copy ``workdir`` to ``dest`` (which must not exist), leaving out ``exclude`` and tool folders."""
    workdir = workdir.resolve()
    skip: List[Path] = [Path(p).resolve() for p in exclude]
    skip.append(dest.resolve())

    def ignore(directory: str, names: List[str]) -> List[str]:
        here = Path(directory).resolve()
        return [n for n in names if n in ALWAYS_EXCLUDED or here / n in skip]

    shutil.copytree(workdir, dest, symlinks=True, ignore=ignore, copy_function=_clone_or_copy)
    return dest


def links_out(workdir: Path) -> List[str]:
    """Symbolic links under ``workdir`` that point outside it: writes through them would leave the sandbox."""
    workdir = workdir.resolve()
    found = []
    for root, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in ALWAYS_EXCLUDED]
        for name in dirs + files:
            path = Path(root, name)
            if path.is_symlink():
                target = path.resolve()
                if workdir not in target.parents and target != workdir:
                    found.append(str(path.relative_to(workdir)))
    return found


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
