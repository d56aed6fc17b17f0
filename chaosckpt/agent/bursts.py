"""Checkpoints written across threads: which checkpoint each thread writes for, how long a checkpoint lasts when
the training, a saver thread or an executor's tasks share it, and what is still being written at the exit.

A checkpoint is every save call between two steps of the training thread. A save made on another thread (an
asynchronous save: a saver thread, an executor task, DCP's ``async_save``) stays that thread's checkpoint across
the training's steps until the thread's work ends, and is of the step at which its work was handed over
(``threads``); bytes one thread serialized into memory and another writes are one checkpoint.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from chaosckpt.agent.threads import Burst, Handoff


class Checkpoint:
    """The checkpoint being written: every save call between two steps (or of one asynchronous save), with its bytes
    and writes counted across them."""

    def __init__(self, index: int, step: int) -> None:
        self.index = index
        self.step = step  # the step whose state it saves
        self.began = time.time()
        self.background: Optional[str] = None  # the thread writing it, when that is not the training thread
        self.holders = 1  # threads (and tasks) writing it; it ends when the last lets go
        self.busy = 0  # its save calls and moves in progress
        self.idle_since = step  # the training step at which its last save call or move returned
        self.bytes = 0
        self.writes = 0
        self.sizes: List[int] = []  # bytes of each of its files, in the order their first bytes came
        self.error: Optional[str] = None
        self.scans: List[Dict[str, object]] = []
        self.whole = False  # the current call saves a whole training state (model and optimizer) in one file
        self.folders: set = set()  # where its files went: JSON state written beside them is part of it
        self.tallies: List[Any] = []  # files the job opened into it (``writers.FileTally``)
        self.payloads: List[Payload] = []  # its save calls into memory, whose bytes a file write may carry
        self.held: Any = None  # what its saved objects hold of the training state (``held.Held``)


AWAITING_LIMIT = 4
"""Checkpoints serialized into memory whose bytes a file write may still carry, at most (a job that serializes
its state every step and never writes it keeps the latest)."""

MEMORY = "memory"
"""The ``via`` of a save call into an in-memory buffer (``io.BytesIO``): no file system sees its bytes."""

PAYLOAD_HEAD = 4096
"""Bytes kept from the start of a checkpoint serialized into memory, to recognise the file write that carries it."""


class Payload(NamedTuple):
    """A save call's bytes serialized into memory: their first bytes, and whether they hold a whole training state."""

    head: bytes
    whole: bool


class Bursts:
    """The recorder's cross-thread part (``Recorder`` derives from it): each thread's ``Burst``, the checkpoints
    begun and not yet ended, and those whose bytes serialized into memory a file may still carry. It relies on
    the recorder's ``step``, ``_stepper``, ``_digest_due``, ``emit`` and ``_finish``."""

    step: int
    _stepper: Optional[int]
    _digest_due: bool
    emit: Callable[..., None]
    _finish: Callable[..., None]

    def __init__(self) -> None:
        self._burst = Burst()  # this thread's part in a checkpoint: the one it writes for, the save call it is in
        self._unfinished: Dict[int, Checkpoint] = {}  # begun, and still held by a thread writing it
        self.awaiting: List[Checkpoint] = []  # serialized into memory, its bytes not yet written to a file
        self._queued: Dict[int, int] = {}  # executor tasks handed work at a step and not yet ended, by step
        self._by_step: Dict[int, Checkpoint] = {}  # unfinished background checkpoints, by the step they save
        self._handed: Dict[int, Handoff] = {}  # work handed to threads and tasks, not yet saving nor ended, by id
        self._savers: set = set()  # the functions (``Handoff.origin``) of threads and tasks that opened a checkpoint
        self._lock = threading.Lock()

    @property
    def checkpoint(self) -> Optional["Checkpoint"]:
        """The checkpoint this thread writes for: open from its first save call to the training thread's next
        step, or, on a background thread, to the end of the thread's task (an asynchronous save)."""
        return self._burst.checkpoint

    @property
    def saving(self) -> bool:
        """This thread is inside a save call: saves it makes itself (DCP's items) are part of it."""
        return self._burst.saving

    @property
    def saving_via(self) -> Optional[str]:
        return self._burst.via

    @property
    def saving_path(self) -> Optional[str]:
        return self._burst.path

    @property
    def moving(self) -> Optional[Dict[str, str]]:
        """The move or copy this thread is making inside its checkpoint."""
        return self._burst.moving

    def begin_move(self, move: Dict[str, str]) -> None:
        self._burst.moving = move
        self._busy(self.checkpoint, 1)

    def end_move(self) -> None:
        self._burst.moving = None
        self._busy(self.checkpoint, -1)

    def _busy(self, ckpt: Optional["Checkpoint"], delta: int) -> None:
        """A save call or a move of ``ckpt`` began (1) or ended (-1): at the exit, one still busy never landed."""
        if ckpt is not None:
            with self._lock:
                ckpt.busy += delta
                if not ckpt.busy:
                    ckpt.idle_since = self.step

    def _in_flight_at_exit(self, ckpt: "Checkpoint") -> bool:
        """Whether ``ckpt``, unfinished at the exit, was still being written: a thread holds it inside a save call
        or with no step since its last, or its bytes serialized into memory at this step were never written."""
        recent = ckpt.idle_since == self.step
        return ckpt.holders > 0 and (ckpt.busy > 0 or recent) or ckpt in self.awaiting and recent

    def handoff(self, task: bool = False, origin: Optional[str] = None, thread: Optional[str] = None) -> Handoff:
        """What a thread or task started now inherits: the checkpoint this thread is saving (its writer threads,
        an executor's task), and the step its data was taken at. The training thread's next step takes the
        parameters' digest before it changes them: a save the task makes after it is of that state."""
        burst = self._burst
        ckpt = burst.checkpoint if burst.saving else None
        handed = Handoff(ckpt, burst.via, burst.path, self.step, task, origin, thread)
        with self._lock:
            if ckpt is not None:
                ckpt.holders += 1
                ckpt.busy += 1
            elif origin is not None:
                self._handed[id(handed)] = handed
            if task:
                self._queued[self.step] = self._queued.get(self.step, 0) + 1
        self._digest_due = True
        return handed

    def unbegun(self) -> List[Handoff]:
        """Work handed to a thread or task whose function saved a checkpoint before, that has neither begun
        saving nor ended: a save in flight since its hand-over."""
        with self._lock:
            return [h for h in self._handed.values() if h.origin in self._savers]

    def adopt(self, handoff: Handoff) -> None:
        """This thread (or task) starts on what ``handoff`` gave it."""
        burst = self._burst
        burst.checkpoint, burst.handed_step, burst.handoff = handoff.checkpoint, handoff.step, handoff
        burst.saving, burst.via, burst.path = handoff.checkpoint is not None, handoff.via, handoff.path

    def task_done(self, handoff: Handoff) -> None:
        """This thread (or task) ends: the checkpoint it wrote for is no longer its to write."""
        if handoff.checkpoint is not None:
            self._busy(handoff.checkpoint, -1)
        with self._lock:
            self._handed.pop(id(handoff), None)
            queued = self._queued.pop(handoff.step, 1) - 1 if handoff.task else 0
            if queued:
                self._queued[handoff.step] = queued
        self.close_checkpoint()
        burst = self._burst
        burst.saving, burst.via, burst.path, burst.handed_step, burst.handoff = False, None, None, None, None
        kept = self._by_step.get(handoff.step) if handoff.task and not queued else None
        if kept is not None and not kept.holders:
            self._let_go(kept)

    def close_checkpoint(self) -> None:
        """This thread's part in its checkpoint ended (the training stepped, its task ended, the process exits):
        once no thread writes it any more, the checkpoint is complete as written."""
        ckpt, self._burst.checkpoint = self._burst.checkpoint, None
        if ckpt is None:
            return
        with self._lock:
            ckpt.holders -= 1
            if ckpt.holders > 0:
                return
        self._let_go(ckpt)

    def _let_go(self, ckpt: "Checkpoint") -> None:
        """No thread writes ``ckpt`` now: it is complete, unless a file may yet carry its bytes serialized into
        memory, or a task handed work at its step may yet add to it (Lightning's two files, handed over one after
        the other before the training's next step)."""
        with self._lock:
            if ckpt in self.awaiting or ckpt.background is not None and (
                    self._queued.get(ckpt.step) or ckpt.step == self.step):
                return
            if self._unfinished.pop(ckpt.index, None) is None:
                return
            if self._by_step.get(ckpt.step) is ckpt:
                del self._by_step[ckpt.step]
        self._finish(ckpt)

    def serialized(self, ckpt: "Checkpoint", payload: "Payload") -> None:
        """A save call of ``ckpt`` serialized it into memory: a file write on any thread may carry its bytes."""
        with self._lock:
            ckpt.payloads.append(payload)
            if ckpt in self.awaiting:
                return
            self.awaiting.append(ckpt)
            oldest = self.awaiting.pop(0) if len(self.awaiting) > AWAITING_LIMIT else None
            if oldest is None or oldest.holders > 0 or self._unfinished.pop(oldest.index, None) is None:
                return
        self._finish(oldest)  # never written to a file: complete as the memory it went to

    def carried(self, ckpt: "Checkpoint") -> None:
        """A file this thread writes carries ``ckpt``'s bytes serialized into memory: the file is part of it, and
        when another thread serialized them, the checkpoint is this thread's to write too."""
        with self._lock:
            if ckpt in self.awaiting:
                self.awaiting.remove(ckpt)
        if ckpt is not self.checkpoint:
            self.carry(ckpt)

    def carry(self, ckpt: "Checkpoint") -> None:
        """This thread writes the bytes another thread serialized into memory for ``ckpt`` (a saver thread handed
        them): the checkpoint is this thread's to write until it waits for more work or ends."""
        with self._lock:
            ckpt.holders += 1
            ckpt.busy += 1
        self.idle()
        self._burst.checkpoint, self._burst.carrying = ckpt, True
        if ckpt.background is None and self._stepper is not None and threading.get_ident() != self._stepper:
            ckpt.background = threading.current_thread().name
            with self._lock:  # kept by its step, so the training's next step lets it go if its writer finished first
                self._by_step.setdefault(ckpt.step, ckpt)
            self.emit("save-thread", save=ckpt.index, thread=ckpt.background)

    def idle(self) -> None:
        """A thread other than the training thread waits for more work (``queue.Queue.get``): the checkpoint it
        was writing, its work done, is no longer its to write."""
        burst = self._burst
        if burst.checkpoint is None or burst.saving or burst.moving is not None or (
                threading.get_ident() == self._stepper):
            return
        if burst.carrying:
            burst.carrying = False
            self._busy(burst.checkpoint, -1)
        self.close_checkpoint()
