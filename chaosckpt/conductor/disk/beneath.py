"""Opening a path beneath a folder without ever following a symbolic link.

chaosckpt rebuilds the disk a power loss leaves from the job's journal, as whoever runs it (root, often), outside
the run's namespaces. Every path it writes there comes from the job, so each is resolved beneath a folder it trusts
(the sandbox, a scratch folder of its own) by the kernel: ``openat2`` with ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the kernel has it (Linux 5.6), else the same walk one
component at a time, each opened with ``O_NOFOLLOW`` relative to the one before. Either way a ``..`` is refused
lexically first, an absolute path too, and a link anywhere on the way (``/proc``'s magic ones included) stops the
walk instead of leading it elsewhere.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from typing import Callable, List

SYS_OPENAT2 = 437
"""The same number on every architecture Linux gave the system call to (x86-64, arm64, riscv, ppc64, s390)."""
RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x02, 0x04, 0x08
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class Escape(OSError):
    """A path that would resolve outside its folder, or through a symbolic link."""


def parts(path: str) -> List[str]:
    """The components of ``path``, a path relative to its folder; an absolute path or a ``..`` is an ``Escape``."""
    if os.path.isabs(path) or "\0" in path:
        raise Escape(errno.EXDEV, "not a path relative to the folder", path)
    names = [name for name in path.split(os.sep) if name not in ("", ".")]
    if ".." in names:
        raise Escape(errno.EXDEV, "it climbs out with ..", path)
    return names


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def openat2(dir_fd: int, path: str, flags: int, mode: int = 0o666) -> int:
    """``path`` opened beneath ``dir_fd`` by the kernel's ``openat2``, no symbolic link followed."""
    names = parts(path)
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0,
                   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    fd = _libc.syscall(SYS_OPENAT2, dir_fd, os.fsencode(os.sep.join(names) or "."), ctypes.byref(how),
                       ctypes.sizeof(how))
    if fd < 0:
        raise _error(ctypes.get_errno(), path)
    return fd


def walk(dir_fd: int, path: str, flags: int, mode: int = 0o666) -> int:
    """``path`` opened beneath ``dir_fd`` one component at a time, each with ``O_NOFOLLOW``: where there is no
    ``openat2``."""
    names = parts(path) or ["."]
    current = dir_fd
    try:
        for name in names[:-1]:
            following = _one(current, name, _DIR, 0, path)
            if current != dir_fd:
                os.close(current)
            current = following
        return _one(current, names[-1], flags | os.O_CLOEXEC, mode, path)
    finally:
        if current != dir_fd:
            os.close(current)


def _one(dir_fd: int, name: str, flags: int, mode: int, path: str) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except NotADirectoryError:  # what O_DIRECTORY says of a link, before O_NOFOLLOW can
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise _error(errno.ELOOP, path) from None
        raise
    except OSError as exc:
        raise _error(exc.errno or errno.EIO, path) from None


def _error(number: int, path: str) -> OSError:
    if number == errno.ELOOP:
        return Escape(number, "a symbolic link is on the way", path)
    if number == errno.EXDEV:
        return Escape(number, "it leads outside the folder", path)
    return OSError(number, os.strerror(number), path)


def _kernel_has_openat2() -> bool:
    """Whether ``openat2`` works here: Linux 5.6 or later, and no seccomp filter (a container's) refusing it."""
    if not sys.platform.startswith("linux"):
        return False
    root = os.open("/", _DIR)
    try:
        os.close(openat2(root, ".", _DIR))
    except OSError:
        return False
    finally:
        os.close(root)
    return True


open_beneath: Callable[..., int] = openat2 if _kernel_has_openat2() else walk
"""``open_beneath(dir_fd, path, flags, mode)``: the kernel's ``openat2`` where there is one, else ``walk``."""


def folder(dir_fd: int, path: str, make: bool = False) -> int:
    """A descriptor of the folder ``path`` beneath ``dir_fd``, made (one component at a time) when ``make`` and
    missing."""
    current = os.dup(dir_fd)
    try:
        for name in parts(path):
            if make:
                try:
                    os.mkdir(name, dir_fd=current)
                except FileExistsError:
                    pass
            following = open_beneath(current, name, _DIR)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current
