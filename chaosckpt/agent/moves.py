"""Files moved or copied into place while a checkpoint is being written: where a checkpoint saved into a file
object or a temporary file really lands, and whether a move became a copy over the live file.

Lightning saves into memory, fsspec writes the bytes to a temporary file in ``$TMPDIR`` and ``shutil.move``s
it onto ``last.ckpt``; when the two are on different file systems the rename fails (EXDEV) and the move
truncates ``last.ckpt`` in place and copies into it. Each ``os.rename``, ``os.replace``, ``os.link`` (a new
name for the same bytes: ``best.pt``, ``epoch-3.pt``), ``shutil.move`` and ``shutil.copyfile`` (``shutil.copy``/
``copy2`` call it) made while a checkpoint is open becomes a ``save-move`` event (names relative to a folder's
descriptor made whole); the destination's folder joins the durability journal before the call, so its
operations are journaled. Outside a checkpoint, and always, the call itself is the job's own.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any, Callable, Optional, Tuple

from chaosckpt.agent import fileops, patches
from chaosckpt.agent.recorder import Recorder

_lstat = os.lstat


def _inode(path: str) -> Optional[Tuple[int, int]]:
    """The regular file at ``path``, as (device, inode), or None."""
    try:
        st = _lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _move_target(src: str, dst: str) -> str:
    """Where ``shutil.move`` puts ``src``: inside ``dst`` when it is a folder."""
    return os.path.join(dst, os.path.basename(src.rstrip(os.sep))) if os.path.isdir(dst) else dst


class Moves:
    """The ``moves`` layer's state: the recorder, and whether this thread is inside an observed call
    (``shutil.move`` calls ``os.rename``, then ``copyfile``: one event, from the outermost call)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.local = threading.local()


def install(rec: Recorder) -> None:
    """Patch the renames, the moves and the copies to report those made inside an open checkpoint."""
    patches.install("moves", Moves(rec))


def observed(moves: Moves, original: Callable, how: str) -> Callable:
    """``original`` (a rename, a move or a copy, as ``how`` says) reported when it lands in an open checkpoint."""
    rec, local = moves.rec, moves.local
    target: Callable[[str, str], str] = _move_target if how == "move" else (lambda s, d: d)

    def call(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        if rec.checkpoint is None or getattr(local, "inside", False) or isinstance(src, int) or isinstance(dst, int):
            return original(src, dst, *args, **kwargs)
        s = os.path.abspath(fileops.resolve(src, kwargs.get("src_dir_fd")))
        d = os.path.abspath(target(s, fileops.resolve(dst, kwargs.get("dst_dir_fd"))))
        source, before = _inode(s), _inode(d)
        rec.checkpoint.folders.add(os.path.dirname(d))  # a copy's writes count there from its first byte
        if rec.journal is not None:
            rec.journal.track(os.path.dirname(d))
        local.inside = True
        rec.begin_move({"how": how, "src": s, "dst": d})
        ok = False
        try:
            result = original(src, dst, *args, **kwargs)
            ok = True
            return result
        finally:
            local.inside = False
            rec.end_move()
            rec.guarded(_record, rec, how, s, d, source, before, ok)

    return call


def _record(rec: Recorder, how: str, src: str, dst: str, source: Optional[Tuple[int, int]],
            before: Optional[Tuple[int, int]], ok: bool) -> None:
    ckpt = rec.checkpoint
    if ckpt is None:
        return
    after = _inode(dst)
    rec.emit("save-move", save=ckpt.index, how=how, src=src, dst=dst, ok=ok,
             copied=how != "rename" and after is not None and after != source,
             over=before is not None and before == after)
