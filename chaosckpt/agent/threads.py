"""Saves that overlap training: the work a thread or an executor's task is handed, and what the job learns of
a background save's error.

A checkpoint belongs to the thread that writes it (``Burst``). A thread started, or a task submitted, from inside
a save call writes for that save (DCP's writer threads); any other is handed the step at which it was given its
data, which is the step an asynchronous save it makes snapshots. Its checkpoint ends when the thread or the task
does, or when the thread waits for more work (``queue.Queue.get``). Work handed to a thread or task running a
function that saved before is a save from its hand-over: unbegun at the exit, it is a checkpoint that never landed. A thread that writes the bytes another
thread serialized into memory for a checkpoint (a saver handed them) writes for that checkpoint. A future's
``result()`` or ``exception()`` that returns a background save's fault is the job noticing it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, Dict, NamedTuple, Optional

from chaosckpt.agent import patches


class Burst(threading.local):
    """One thread's part in a checkpoint: the checkpoint it writes for and the save call or move it is in."""

    checkpoint: Any = None  # the recorder's ``Checkpoint``
    saving = False
    via: Optional[str] = None
    path: Optional[str] = None
    moving: Optional[Dict[str, str]] = None
    handed_step: Optional[int] = None  # the step at which this thread (or task) was handed its work
    handoff: Any = None  # the ``Handoff`` this thread (or task) runs
    carrying = False  # it writes bytes another thread serialized into memory for its checkpoint


class Handoff(NamedTuple):
    """What a thread or task inherits from the thread that started it."""

    checkpoint: Any
    via: Optional[str]
    path: Optional[str]
    step: int
    task: bool  # an executor's task (its checkpoint may be shared with the others handed work at its step)
    origin: Optional[str] = None  # the function the thread or task runs: once it saved, each later one is a save
    thread: Optional[str] = None  # the started thread's name (an executor's task runs on a thread known later)


def install(rec: Any) -> None:
    """Carry the save a thread or task is started from into it, and hear the job look at a future's error."""
    patches.install("threads", rec)


def thread_start(rec: Any, original: Callable) -> Callable:
    def start(self: threading.Thread) -> None:
        target = getattr(self, "_target", None) or type(self).run
        handoff, run = rec.handoff(origin=_origin(target), thread=self.name), self.run
        self.run = lambda: _carried(rec, handoff, run)
        original(self)

    return start


def executor_submit(rec: Any, original: Callable) -> Callable:
    def submit(self: concurrent.futures.Executor, fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
        handoff = rec.handoff(task=True, origin=_origin(fn))
        return original(self, lambda: _carried(rec, handoff, fn, *args, **kwargs))

    return submit


def queue_get(rec: Any, original: Callable) -> Callable:
    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        if rec.checkpoint is not None:
            rec.guarded(rec.idle)
        return original(self, *args, **kwargs)

    return get


def future_result(rec: Any, original: Callable) -> Callable:
    def result(self: concurrent.futures.Future, timeout: Optional[float] = None) -> Any:
        try:
            return original(self, timeout)
        except BaseException as exc:
            rec.guarded(rec.observed, exc)
            raise

    return result


def future_exception(rec: Any, original: Callable) -> Callable:
    def exception(self: concurrent.futures.Future, timeout: Optional[float] = None) -> Optional[BaseException]:
        exc = original(self, timeout)
        rec.guarded(rec.observed, exc)
        return exc

    return exception


def _origin(fn: Any) -> Optional[str]:
    """The function a thread or task runs, by name (a ``functools.partial``'s function)."""
    fn = getattr(fn, "func", fn)
    name = getattr(fn, "__qualname__", None)
    return None if name is None else f"{getattr(fn, '__module__', None)}.{name}"


def _carried(rec: Any, handoff: Handoff, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    rec.guarded(rec.adopt, handoff)
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:
        rec.guarded(rec.task_failed, exc)
        raise
    finally:
        rec.guarded(rec.task_done, handoff)
