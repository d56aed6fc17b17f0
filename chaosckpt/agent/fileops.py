"""The durability journal: every file operation the job makes in its checkpoint directories.

Active only when the conductor asks for it (power loss, a full disk, a crash-point
sweep). Each ``open`` for writing (through a folder's descriptor too: ``dir_fd``), ``write``, ``pwrite``,
``writev``, ``pwritev``, ``fsync``, directory ``fsync``, ``rename``, ``link``, ``unlink``, ``mkdir``, ``rmdir``
and ``symlink`` under a tracked directory becomes an ``op`` event, so the conductor can rebuild what a disk would
hold after a power loss at any point; one made while a checkpoint is open names it (``save``). Data that an
operation is about to destroy and that may still be durable (an inode replaced by a rename or unlinked, a file
truncated after an fsync) is preserved first under the run directory's ``keep/``, by hard link where it can: the
sandbox is ours, never the user's.
"""

from __future__ import annotations

import builtins
import io
import os
import stat
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from chaosckpt.agent import patches
from chaosckpt.agent.faults import disk_full_error

_os_fstat, _os_link = os.fstat, os.link
_os_stat, _os_lstat = os.stat, os.lstat

Inode = Tuple[int, int]


class Journal:
    """Decides which paths are tracked, emits ``op`` events and keeps data an op would destroy."""

    def __init__(self, emit: Callable[..., None], tracked: List[str], keep_dir: str) -> None:
        self._emit = emit
        self.tracked: List[str] = [os.path.abspath(d) for d in tracked]
        self.ignored = os.path.dirname(os.path.abspath(keep_dir))  # the run directory: our own files
        self.keep_dir = keep_dir
        self._lock = threading.Lock()
        self._keeps = 0
        self._fds: Dict[int, str] = {}
        self._durable: Dict[Inode, int] = {}  # inode -> bytes this process made durable, for truncation keeps
        self.ops = 0
        self.on_op: Optional[Callable[[int, str], None]] = None
        self.quota: Optional[int] = None  # bytes that may still be written before the disk is full
        self.open_save: Callable[[], Optional[int]] = lambda: None  # the checkpoint open now, if any

    def track(self, directory: str) -> None:
        directory = os.path.abspath(directory)
        if directory not in self.tracked:
            self.tracked.append(directory)

    def is_tracked(self, path: Any) -> bool:
        try:
            p = os.path.abspath(os.fsdecode(path))
        except TypeError:
            return False
        if p.startswith(self.ignored + os.sep):
            return False
        return any(p == d or p.startswith(d + os.sep) for d in self.tracked)

    def op(self, kind: str, **fields: Any) -> None:
        with self._lock:
            self.ops += 1
            index = self.ops
        save = self.open_save()
        self._emit("op", op=kind, n=index, **fields, **({} if save is None else {"save": save}))
        if self.on_op is not None:
            self.on_op(index, kind)

    def _keep(self, path: str, inode: Inode, length: Optional[int] = None) -> str:
        """Preserve the data of ``path`` (its first ``length`` bytes, or all of it by hard link)."""
        with self._lock:
            self._keeps += 1
            dest = os.path.join(self.keep_dir, f"{os.getpid()}.{inode[1]}.{self._keeps}")  # ranks share keep/
        if length is None:
            try:
                _os_link(path, dest)
                return dest
            except OSError:
                pass
        with builtins_open(path, "rb") as src, builtins_open(dest, "wb") as dst:
            remaining = length
            while remaining is None or remaining > 0:
                chunk = src.read(1 << 20 if remaining is None else min(1 << 20, remaining))
                if not chunk:
                    break
                dst.write(chunk)
                if remaining is not None:
                    remaining -= len(chunk)
        return dest

    # ---- hooks called by the patched functions -------------------------------------------

    def before_open(self, path: str, flags: int) -> Tuple[bool, Optional[Inode], Optional[str]]:
        """Before an open for writing: whether the file existed, and a keep if O_TRUNC destroys durable data."""
        try:
            st = _os_stat(path)
        except OSError:
            return False, None, None
        inode = (st.st_dev, st.st_ino)
        keep = None
        if flags & os.O_TRUNC and st.st_size and stat.S_ISREG(st.st_mode):
            durable = self._durable.get(inode, st.st_size)
            if durable:
                keep = self._keep(path, inode, min(durable, st.st_size))
        return True, inode, keep

    def opened(self, path: str, fd: int, flags: int, existed: bool, keep: Optional[str]) -> None:
        st = _os_fstat(fd)
        self._fds[fd] = os.path.abspath(path)
        self.op("open", path=os.path.abspath(path), ino=[st.st_dev, st.st_ino], created=not existed,
                trunc=bool(flags & os.O_TRUNC), size=st.st_size, keep=keep)

    def watch_dir(self, fd: int, path: str) -> None:
        """A directory opened (to be fsynced, typically): remember which one its descriptor is."""
        self._fds[fd] = os.path.abspath(path)

    def closed(self, fd: int) -> None:
        self._fds.pop(fd, None)

    def fd_path(self, fd: int) -> Optional[str]:
        return self._fds.get(fd)

    def charge(self, size: int) -> int:
        """How many of ``size`` bytes fit on the disk; raises ENOSPC when none do."""
        if self.quota is None:
            return size
        with self._lock:
            fits = min(size, self.quota)
            self.quota -= fits
        if fits == 0 and size:
            raise disk_full_error()
        return fits

    def wrote(self, fd: int, offset: int, size: int) -> None:
        st = _os_fstat(fd)
        self.op("write", path=self._fds.get(fd), ino=[st.st_dev, st.st_ino], off=offset, len=size)

    def synced(self, fd: int) -> None:
        st = _os_fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self.op("dirsync", path=self._fds.get(fd))
            return
        self._durable[(st.st_dev, st.st_ino)] = st.st_size
        self.op("fsync", path=self._fds.get(fd), ino=[st.st_dev, st.st_ino], size=st.st_size)

    def before_replace(self, src: str, dst: str) -> Dict[str, Any]:
        fields: Dict[str, Any] = {"src": os.path.abspath(src), "dst": os.path.abspath(dst)}
        try:
            s = _os_lstat(src)
            fields["ino"] = [s.st_dev, s.st_ino]
        except OSError:
            return fields
        try:
            d = _os_lstat(dst)
        except OSError:
            return fields
        if stat.S_ISREG(d.st_mode) and (d.st_dev, d.st_ino) != (s.st_dev, s.st_ino):
            fields["replaced"] = [d.st_dev, d.st_ino]
            fields["keep"] = self._keep(dst, (d.st_dev, d.st_ino))
        return fields

    def before_unlink(self, path: str) -> Dict[str, Any]:
        fields: Dict[str, Any] = {"path": os.path.abspath(path)}
        try:
            st = _os_lstat(path)
        except OSError:
            return fields
        fields["ino"] = [st.st_dev, st.st_ino]
        if stat.S_ISREG(st.st_mode):
            fields["keep"] = self._keep(path, (st.st_dev, st.st_ino))
        return fields


builtins_open = builtins.open


class TrackedFileIO(io.FileIO):
    """A raw file in a tracked directory: each write is journaled and charged against the disk quota."""

    journal: Journal

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        fits = self.journal.charge(view.nbytes)
        offset = self.tell()
        written = super().write(view[:fits])
        if written:
            self.journal.wrote(self.fileno(), offset, written)
        if fits < view.nbytes:
            raise disk_full_error()
        return written

    def close(self) -> None:
        if not self.closed and self.closefd:
            self.journal.closed(self.fileno())
        super().close()


def resolve(path: Any, dir_fd: Optional[int]) -> Optional[str]:
    """The path a call names, a name relative to a folder's descriptor (``dir_fd``) made whole; None for a
    descriptor."""
    if isinstance(path, int):
        return None
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    return path


def layered(raw: Any, mode: str, buffering: int, encoding: Optional[str], errors: Optional[str],
            newline: Optional[str], blksize: int) -> Any:
    """What ``open()`` builds over the raw file ``raw`` for these arguments, by CPython's rules (the buffer of
    ``blksize`` bytes by default, line buffering for 1 or a terminal), so that the job's writes reach the disk in
    the same pieces and order as without the agent."""
    if buffering == 0:
        return raw
    line_buffering = buffering == 1 or buffering < 0 and raw.isatty()
    size = blksize if buffering < 0 or line_buffering else buffering
    buffered = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw, size)
    if "b" in mode:
        return buffered
    text = io.TextIOWrapper(buffered, io.text_encoding(encoding), errors, newline, line_buffering)
    text.mode = mode
    return text


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _flags_of(mode: str) -> int:
    flags = 0
    if "w" in mode:
        flags |= os.O_CREAT | os.O_TRUNC
    if "a" in mode:
        flags |= os.O_CREAT | os.O_APPEND
    if "x" in mode:
        flags |= os.O_CREAT | os.O_EXCL
    return flags


def install(journal: Journal) -> None:
    """Journal ``open``, ``io.open`` and the ``os`` functions that change files, for tracked paths only (the
    ``journal`` layer of ``patches``)."""
    os.makedirs(journal.keep_dir, exist_ok=True)
    patches.install("journal", journal)


def tracked_open(journal: Journal, original: Callable) -> Callable:
    TrackedFileIO.journal = journal

    def open_(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
        writing = any(c in mode for c in "wax+")
        if isinstance(file, int):
            path = journal.fd_path(file)
            if not writing or path is None:
                return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
            existed, keep = True, None
        else:
            invalid = buffering == 0 and "b" not in mode or "b" in mode and (encoding or errors or newline)
            if not writing or invalid or not journal.is_tracked(file):
                return original(file, mode, buffering, encoding, errors, newline, closefd, opener)
            path = os.fsdecode(file)
            existed, _, keep = journal.before_open(path, _flags_of(mode))
        raw_mode = mode.replace("b", "").replace("t", "")
        raw = TrackedFileIO(file, raw_mode, closefd=closefd, opener=opener)
        if not isinstance(file, int) and journal.fd_path(raw.fileno()) is None:  # an opener calling os.open journaled it
            journal.opened(path, raw.fileno(), _flags_of(mode), existed, keep)
        if buffering == 0 and "b" not in mode:
            raise ValueError("can't have unbuffered text I/O")
        return layered(raw, mode, buffering, encoding, errors, newline, raw._blksize)

    return open_


def tracked_os_open(journal: Journal, original: Callable) -> Callable:
    def open_(path, flags, mode=0o777, *, dir_fd=None):
        full = resolve(path, dir_fd)
        if full is None or not journal.is_tracked(full):
            return original(path, flags, mode, dir_fd=dir_fd)
        if os.path.isdir(full):
            fd = original(path, flags, mode, dir_fd=dir_fd)
            journal.watch_dir(fd, full)
            return fd
        if not flags & _WRITE_FLAGS:
            return original(path, flags, mode, dir_fd=dir_fd)
        existed, _, keep = journal.before_open(full, flags)
        fd = original(path, flags, mode, dir_fd=dir_fd)
        journal.opened(full, fd, flags, existed, keep)
        return fd

    return open_


def tracked_write(journal: Journal, original: Callable) -> Callable:
    def write(fd, data):
        if journal.fd_path(fd) is None:
            return original(fd, data)
        view = memoryview(data).cast("B")
        return _journaled(journal, fd, view.nbytes, None, lambda n: original(fd, view[:n]))

    return write


def cut(buffers: Any, size: int) -> List[memoryview]:
    """The first ``size`` bytes of ``buffers`` (a ``writev``'s), as views."""
    out = []
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        if size <= 0:
            break
        out.append(view[:size])
        size -= view.nbytes
    return out


def _nbytes(buffers: Any) -> int:
    return sum(memoryview(b).nbytes for b in buffers)


def _journaled(journal: Journal, fd: int, size: int, offset: Optional[int], send: Callable[[int], int]) -> int:
    """Write ``size`` bytes by ``send(n)`` (the first n of them) at ``offset`` (None: the file's position), charged
    against the disk quota and journaled."""
    fits = journal.charge(size)
    at = os.lseek(fd, 0, os.SEEK_CUR) if offset is None else offset
    written = send(fits)
    if written:
        journal.wrote(fd, at, written)
    if fits < size:
        raise disk_full_error()
    return written


def tracked_pwrite(journal: Journal, original: Callable) -> Callable:
    def pwrite(fd, data, offset):
        if journal.fd_path(fd) is None:
            return original(fd, data, offset)
        view = memoryview(data).cast("B")
        return _journaled(journal, fd, view.nbytes, offset, lambda n: original(fd, view[:n], offset))

    return pwrite


def tracked_writev(journal: Journal, original: Callable) -> Callable:
    def writev(fd, buffers):
        if journal.fd_path(fd) is None:
            return original(fd, buffers)
        buffers = list(buffers)
        return _journaled(journal, fd, _nbytes(buffers), None, lambda n: original(fd, cut(buffers, n)))

    return writev


def tracked_pwritev(journal: Journal, original: Callable) -> Callable:
    def pwritev(fd, buffers, offset, *flags):
        if journal.fd_path(fd) is None:
            return original(fd, buffers, offset, *flags)
        buffers = list(buffers)
        return _journaled(journal, fd, _nbytes(buffers), offset,
                          lambda n: original(fd, cut(buffers, n), offset, *flags))

    return pwritev


def tracked_sendfile(journal: Journal, original: Callable) -> Callable:
    def sendfile(out_fd, in_fd, offset, count, *args, **kwargs):
        if journal.fd_path(out_fd) is None:
            return original(out_fd, in_fd, offset, count, *args, **kwargs)
        fits = journal.charge(count)
        position = os.lseek(out_fd, 0, os.SEEK_CUR)
        sent = original(out_fd, in_fd, offset, fits, *args, **kwargs)
        if sent:
            journal.wrote(out_fd, position, sent)
        if fits < count and not sent:
            raise disk_full_error()
        return sent

    return sendfile


def tracked_sync(journal: Journal, original: Callable) -> Callable:
    def sync(fd):
        result = original(fd)
        if not isinstance(fd, int):
            fd = fd.fileno()
        if journal.fd_path(fd) is not None:
            journal.synced(fd)
        return result

    return sync


def tracked_close(journal: Journal, original: Callable) -> Callable:
    def close(fd):
        journal.closed(fd)
        return original(fd)

    return close


def tracked_rename(journal: Journal, original: Callable) -> Callable:
    def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        s, d = resolve(src, src_dir_fd), resolve(dst, dst_dir_fd)
        if not (journal.is_tracked(s) or journal.is_tracked(d)):
            return original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        fields = journal.before_replace(s, d)
        result = original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        journal.op("rename", **fields)
        return result

    return rename


def tracked_unlink(journal: Journal, original: Callable, kind: str) -> Callable:
    """``os.unlink`` and ``os.remove`` (``kind`` "unlink": the file's data is kept first), or ``os.rmdir``."""
    def unlink(path, *, dir_fd=None):
        full = resolve(path, dir_fd)
        if full is None or not journal.is_tracked(full):
            return original(path, dir_fd=dir_fd)
        fields = journal.before_unlink(full) if kind == "unlink" else {"path": os.path.abspath(full)}
        result = original(path, dir_fd=dir_fd)
        journal.op(kind, **fields)
        return result

    return unlink


def tracked_mkdir(journal: Journal, original: Callable) -> Callable:
    def mkdir(path, mode=0o777, *, dir_fd=None):
        full = resolve(path, dir_fd)
        result = original(path, mode, dir_fd=dir_fd)
        if full is not None and journal.is_tracked(full):
            journal.op("mkdir", path=os.path.abspath(full))
        return result

    return mkdir


def tracked_link(journal: Journal, original: Callable) -> Callable:
    """``os.link``: a new name for the same inode (its data, torn or whole, is the original's)."""
    def link(src, dst, *, src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True):
        s, d = resolve(src, src_dir_fd), resolve(dst, dst_dir_fd)
        result = original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)
        if d is not None and journal.is_tracked(d):
            st = _os_lstat(d)
            journal.op("link", src=None if s is None else os.path.abspath(s), path=os.path.abspath(d),
                       ino=[st.st_dev, st.st_ino])
        return result

    return link


def tracked_symlink(journal: Journal, original: Callable) -> Callable:
    def symlink(src, dst, target_is_directory=False, *, dir_fd=None):
        full = resolve(dst, dir_fd)
        result = original(src, dst, target_is_directory, dir_fd=dir_fd)
        if full is not None and journal.is_tracked(full):
            st = _os_lstat(full)
            journal.op("symlink", path=os.path.abspath(full), target=os.fsdecode(src), ino=[st.st_dev, st.st_ino])
        return result

    return symlink
