"""A checkpoint's writers besides ``torch.save``: files the job opens (``open``, ``io.open``, pathlib), descriptors
it writes (``os.open``, by a folder's descriptor too, then ``os.write``, ``os.pwrite``, ``os.writev``,
``os.pwritev`` or ``os.fdopen``), kernel copies (``sendfile``, ``copy_file_range``: shutil's copies) and
safetensors' native writer.

While a checkpoint is open (from its first save call to the next step), a file opened for writing in its
folders counts toward it: its bytes add to the checkpoint's, so that an armed kill or ENOSPC lands at a byte
fraction of the whole checkpoint, whichever writer carries that byte, or in the one file ``file`` names.
Counting never changes the job's I/O: the same system calls, in the same order, through buffers of the size
``open()`` picks. Only an armed fault does (safetensors then writes through Python, see ``install_safetensors``).
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from chaosckpt.agent import fileops, patches
from chaosckpt.agent.faults import disk_full_error
from chaosckpt.agent.bursts import Checkpoint, Payload
from chaosckpt.agent.recorder import Recorder
from chaosckpt.locations import location

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
OWN_WRITERS = ("path", "fileobj", "safetensors")
"""Save calls that count their own bytes (a ``CountingWriter``): files they open are not counted again."""


_ARMED = threading.Lock()
"""Held around an armed checkpoint's writes: DCP writes its files from threads, and the fault fires once."""
_ORDINALS = threading.Lock()
"""Held while a file of a checkpoint takes its place among the checkpoint's files."""


class FileTally:
    """Writes and bytes into one file of the open checkpoint, and the armed fault if it can land in them."""

    def __init__(self, rec: Recorder, checkpoint: Checkpoint, path: Optional[str], reported: bool = False,
                 carrier: bool = False, named: Optional[str] = None) -> None:
        self.rec = rec
        self.checkpoint = checkpoint
        self.path = None if path is None else os.path.abspath(path)
        self._ordinal: Optional[int] = None
        self.writes = 0
        self.bytes = 0
        self.full = False  # an ENOSPC fired in this file: the disk stays full for it
        self.error: Optional[str] = None  # why a write into it failed
        self.reported = reported  # its save-file event is sent (or another save call's covers it)
        self.carrier = carrier  # part of the checkpoint only if it carries bytes a save call serialized into memory
        self.payload: Optional[Payload] = None  # the checkpoint serialized into memory whose bytes it carries
        self.undecided = bool(checkpoint.payloads) or carrier  # its first write tells whether it carries them
        self.foreign = False  # a carrier whose first write was not the checkpoint's bytes
        fault = rec.fault if rec.fault is not None and rec.fault.save == checkpoint.index else None
        name = named or path  # what ``file=`` matches: the file the job names (safetensors' bytes land beside it)
        matches = fault is None or fault.file is None or name is not None and os.path.basename(name) == fault.file
        self.fault = fault if fault is not None and fault.kind in ("halt", "preempt", "enospc") and matches else None
        self.ends: Optional[list] = [] if fault is not None and fault.write_ends else None

    def live(self) -> bool:
        """Whether its writes still count: its checkpoint is still the open one (or, before its first write, one
        whose bytes serialized into memory a file may yet carry), and the file is part of it."""
        if self.foreign:
            return False
        return self.checkpoint is self.rec.checkpoint or self.undecided and self.checkpoint in self.rec.awaiting

    def _recognise(self, data: Optional[memoryview]) -> None:
        """At the first write: whether the file carries a checkpoint serialized into memory (the write begins with
        its first bytes, 64 at least or the whole of a shorter one). A file that carries one is part of the
        checkpoint wherever it is, and its folder joins the checkpoint's (unless it is the temporary folder)."""
        self.undecided = False
        for payload in self.checkpoint.payloads if data is not None else ():
            n = min(len(payload.head), data.nbytes)
            if n >= min(len(payload.head), 64) and n and data[:n] == payload.head[:n]:
                self.payload = payload
                break
        self.foreign = self.carrier and self.payload is None
        if self.payload is not None:
            self.rec.carried(self.checkpoint)
        if self.payload is not None and self.path is not None:
            folder = os.path.dirname(self.path)
            if folder != os.path.abspath(tempfile.gettempdir()):
                self.checkpoint.folders.add(folder)

    def _counted(self) -> Any:
        return self if self.fault is not None and self.fault.per_file() else self.checkpoint

    def ordinal(self) -> int:
        """Its place among the checkpoint's files, in the order their first bytes came (given at its first bytes
        counted: a file written nothing has none)."""
        if self._ordinal is None:
            with _ORDINALS:
                self.checkpoint.sizes.append(0)
                self._ordinal = len(self.checkpoint.sizes)
        return self._ordinal

    def count(self, size: int) -> None:
        self.writes += 1
        self.bytes += size
        self.checkpoint.sizes[self.ordinal() - 1] += size
        if self.ends is not None:
            self.ends.append(self.bytes)
        self.checkpoint.writes += 1
        self.checkpoint.bytes += size

    def write(self, size: int, send: Callable[[Optional[int]], Optional[int]],
              flush: Optional[Callable[[], Any]] = None, data: Optional[memoryview] = None) -> Optional[int]:
        """Write ``size`` bytes through ``send`` (``send(n)`` writes the first n bytes, ``send(None)`` all that
        the job asked for) and count them; where the armed fault lands, write the bytes before it, ``flush``,
        and fire: halt, or raise ENOSPC. ``data``: the bytes, when the writer has them in hand."""
        if self.undecided:
            self._recognise(data)
            if not self.live():
                return send(None)  # not the checkpoint's: the job's own write, uncounted
        if self.full:
            raise disk_full_error()
        try:
            return self._write(size, send, flush)
        except OSError as exc:  # the disk refused it (the fault's ENOSPC, a full disk's, any other)
            if self.error is None:
                self.error = os.strerror(exc.errno) if exc.errno else str(exc)
            raise
        except BaseException as exc:  # a signal handler's exit (or any exception it raised) cut the write short
            if self.error is None:
                self.error = f"interrupted by {type(exc).__name__}"
            raise

    def _write(self, size: int, send: Callable[[Optional[int]], Optional[int]],
               flush: Optional[Callable[[], Any]]) -> int:
        if self.fault is None:
            return self._count(size, send(None))
        with _ARMED:
            counted = self._counted()
            place = self._ordinal or len(self.checkpoint.sizes) + 1  # its first counted bytes would take the next
            elsewhere = self.fault is None or self.fault.file_index not in (None, place)
            cut = None if elsewhere else self.fault.cut(counted.writes, counted.bytes, size)
            if cut is None:
                return self._count(size, send(None))
            preempted = self.fault.kind == "preempt"
            fields = {"write": counted.writes + 1, "bytes": counted.bytes + (0 if preempted else cut), "path": self.path}
            self.fault = None
            if not preempted:
                if cut:
                    send(cut)
                if flush is not None:
                    flush()
                self.full = True
                if cut:
                    self.count(cut)
        self.rec.fire(**fields)
        # a preemption's signal lands before this write, which goes on after it; a halt or ENOSPC never returns here
        return self._count(size, send(None)) if preempted else 0

    def _count(self, size: int, written: Optional[int]) -> int:
        written = size if written is None else written
        if written:
            self.count(written)
        return written

    def close_out(self) -> None:
        """The file is closed, or its checkpoint ends first: its ``save-file`` event, once."""
        if self.reported:
            return
        self.reported = True
        if self.carrier and self.payload is None:
            return  # it never carried the checkpoint's bytes: no file of it
        if self.error is not None and self.checkpoint.error is None:
            self.checkpoint.error = self.error
        memory = {} if self.payload is None else {"memory": True, **({"whole": True} if self.payload.whole else {})}
        self.rec.emit("save-file", save=self.checkpoint.index, path=self.path, via="write", ok=self.error is None,
                      bytes=self.bytes, writes=self.writes, error=self.error, **memory,
                      **({} if self.ends is None else {"ends": self.ends}))


class CountedRaw(io.RawIOBase):
    """The raw file under a buffered file the job opened into its checkpoint: each write is counted, and the
    armed fault fires at its byte. Everything else is the wrapped raw file's."""

    def __init__(self, raw: Any, tally: FileTally, on_close: Callable[["CountedRaw"], None]) -> None:
        self._raw = raw
        self.tally: Optional[FileTally] = tally  # None once a torch.save into it counts its bytes itself
        self._on_close = on_close

    def write(self, data: Any) -> Optional[int]:
        tally = self.tally
        if tally is None or not tally.live():
            return self._raw.write(data)
        view = memoryview(data).cast("B")
        return tally.write(view.nbytes, lambda n: self._raw.write(view if n is None else view[:n]), data=view)

    def readinto(self, buffer: Any) -> Optional[int]:
        return self._raw.readinto(buffer)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def truncate(self, size: Optional[int] = None) -> int:
        return self._raw.truncate(size)

    def fileno(self) -> int:
        return self._raw.fileno()

    def isatty(self) -> bool:
        return self._raw.isatty()

    def readable(self) -> bool:
        return self._raw.readable()

    def writable(self) -> bool:
        return self._raw.writable()

    def seekable(self) -> bool:
        return self._raw.seekable()

    @property
    def name(self) -> Any:
        return self._raw.name

    @property
    def mode(self) -> str:
        return self._raw.mode

    @property
    def closefd(self) -> bool:
        return self._raw.closefd

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._on_close(self)
            self._raw.close()
        finally:
            super().close()


def counts_into(rec: Recorder, path: Any) -> Optional[Checkpoint]:
    """The open checkpoint if a file opened for writing at ``path`` now is part of it: inside its folders or
    where they keep checkpoints (the folder above ``checkpoint-8/``), or inside the DCP folder being saved."""
    ckpt = rec.checkpoint
    if ckpt is None or not rec.enabled or rec.saving and rec.saving_via in OWN_WRITERS:
        return None
    try:
        folder = os.path.dirname(os.path.abspath(os.fsdecode(path)))
    except TypeError:
        return None
    roots = [location(os.path.join(f, "x")) for f in ckpt.folders]
    if _in_dcp(rec) and rec.saving_path is not None:
        roots.append(rec.saving_path)
    return ckpt if any(folder == r or folder.startswith(r + os.sep) for r in roots) else None


def opened_into(rec: Recorder, path: Any) -> Tuple[Optional[Checkpoint], bool]:
    """The open checkpoint a file opened for writing at ``path`` now may be part of, and whether it is only if it
    carries bytes the checkpoint serialized into memory (a file outside its folders, while it has some)."""
    ckpt = counts_into(rec, path)
    if ckpt is not None:
        return ckpt, False
    ckpt = rec.checkpoint or (rec.awaiting[-1] if rec.awaiting else None)
    if ckpt is None or not ckpt.payloads or not rec.enabled or rec.saving:
        return None, False
    return ckpt, True


def _in_dcp(rec: Recorder) -> bool:
    return rec.saving and rec.saving_via == "dcp"


def claim(f: Any) -> None:
    """``torch.save`` into a file object the job opened into its checkpoint: torch.save's ``CountingWriter``
    counts that file from now on, so that no byte counts twice."""
    raw = getattr(getattr(f, "buffer", f), "raw", f)
    if isinstance(raw, CountedRaw) and raw.tally is not None:
        raw.tally.reported = True
        raw.tally = None


class Counter:
    """The ``writers`` layer's state: the recorder, and the tally of each descriptor open into its checkpoint."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.fds: Dict[int, FileTally] = {}

    def track(self, ckpt: Checkpoint, path: Any, fd: int, carrier: bool = False) -> FileTally:
        tally = FileTally(self.rec, ckpt, os.fsdecode(path), reported=_in_dcp(self.rec),  # DCP's save-file covers it
                          carrier=carrier)
        ckpt.tallies.append(tally)
        self.fds[fd] = tally
        return tally

    def closed(self, raw: CountedRaw) -> None:
        self.fds.pop(raw.fileno(), None)
        if raw.tally is not None:
            raw.tally.close_out()


def install(rec: Recorder) -> None:
    """Count the checkpoint's bytes that ``open``, ``os.write`` (``pwrite``, ``writev``, ``pwritev``), ``sendfile``
    and ``copy_file_range`` carry (the ``writers`` layer of ``patches``, over the durability journal's, which then
    see the same calls)."""
    patches.install("writers", Counter(rec))


def counted_open(counter: Counter, inner_open: Callable) -> Callable:
    rec = counter.rec

    def open_(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
        if rec.checkpoint is None and not rec.awaiting or not any(c in mode for c in "wax+"):
            return inner_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        binary = "b" in mode
        odd = buffering == 1 and binary or buffering == 0 and not binary or binary and (encoding or errors or newline)
        tally = counter.fds.get(file) if isinstance(file, int) and not odd else None  # os.fdopen of a counted fd
        ckpt, carrier = (None, False) if odd or isinstance(file, int) else opened_into(rec, file)
        if ckpt is None and tally is None:  # open() warns or raises on the odd ones
            return inner_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        inner = inner_open(file, mode.replace("t", "") + ("" if binary else "b"), 0, None, None, None, closefd, opener)
        raw = CountedRaw(inner, tally or counter.track(ckpt, file, inner.fileno(), carrier), counter.closed)
        return fileops.layered(raw, mode, buffering, encoding, errors, newline, inner._blksize)

    return open_


def counted_os_open(counter: Counter, original: Callable) -> Callable:
    rec = counter.rec

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        fd = original(path, flags, mode, dir_fd=dir_fd)
        full = None if rec.checkpoint is None and not rec.awaiting or not flags & _WRITE_FLAGS else (
            fileops.resolve(path, dir_fd))
        ckpt, carrier = (None, False) if full is None else opened_into(rec, full)
        if ckpt is not None:
            counter.track(ckpt, full, fd, carrier)
        return fd

    return open_


def counted_write(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def write(fd, data):
        tally = fds.get(fd) if fds else None
        if tally is None or not tally.live():
            return original(fd, data)
        view = memoryview(data).cast("B")
        return tally.write(view.nbytes, lambda n: original(fd, view if n is None else view[:n]), data=view)

    return write


def counted_pwrite(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def pwrite(fd, data, offset):
        tally = fds.get(fd) if fds else None
        if tally is None or not tally.live():
            return original(fd, data, offset)
        view = memoryview(data).cast("B")
        return tally.write(view.nbytes, lambda n: original(fd, view if n is None else view[:n], offset), data=view)

    return pwrite


def counted_writev(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def writev(fd, buffers, *offset):
        tally = fds.get(fd) if fds else None
        if tally is None or not tally.live():
            return original(fd, buffers, *offset)
        buffers = [memoryview(b).cast("B") for b in buffers]
        size = sum(b.nbytes for b in buffers)
        return tally.write(size, lambda n: original(fd, buffers if n is None else fileops.cut(buffers, n), *offset),
                           data=buffers[0] if buffers else None)

    return writev


def counted_pwritev(counter: Counter, original: Callable) -> Callable:
    """``os.pwritev(fd, buffers, offset[, flags])``: counted as ``writev``, at its offset."""
    return counted_writev(counter, original)


def _copied(in_fd: int, offset: Optional[int], count: int) -> int:
    """How many of ``count`` bytes a copy from ``in_fd`` really moves: shutil asks for more than is left."""
    start = os.lseek(in_fd, 0, os.SEEK_CUR) if offset is None else offset
    return max(0, min(count, os.fstat(in_fd).st_size - start))


def counted_sendfile(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def sendfile(out_fd, in_fd, offset, count, *args, **kwargs):
        tally = fds.get(out_fd) if fds else None
        if tally is None or not tally.live():
            return original(out_fd, in_fd, offset, count, *args, **kwargs)
        size = _copied(in_fd, offset, count) if tally.fault is not None else count
        return tally.write(size, lambda n: original(out_fd, in_fd, offset, count if n is None else n, *args, **kwargs))

    return sendfile


def counted_copy_file_range(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def copy_file_range(src, dst, count, offset_src=None, offset_dst=None):
        tally = fds.get(dst) if fds else None
        if tally is None or not tally.live():
            return original(src, dst, count, offset_src, offset_dst)
        size = _copied(src, offset_src, count) if tally.fault is not None else count
        return tally.write(size, lambda n: original(src, dst, count if n is None else n, offset_src, offset_dst))

    return copy_file_range


def counted_close(counter: Counter, original: Callable) -> Callable:
    fds = counter.fds

    def close(fd):
        tally = fds.pop(fd, None) if fds else None
        if tally is not None:
            tally.close_out()
        return original(fd)

    return close
