"""Saves that overlap training: the work a thread or an executor's task is handed, and what the job learns of
a background save's error.

A checkpoint belongs to the thread that writes it (``Burst``). A thread started, or a task submitted, from inside
a save call writes for that save (DCP's writer threads); any other is handed the step at which it was given its
data, which is the step an asynchronous save it makes snapshots. Its checkpoint ends when the thread or the task
does. A future's ``result()`` or ``exception()`` that returns a background save's fault is the job noticing it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, Dict, NamedTuple, Optional


class Burst(threading.local):
    """One thread's part in a checkpoint: the checkpoint it writes for and the save call or move it is in."""

    checkpoint: Any = None  # the recorder's ``Checkpoint``
    saving = False
    via: Optional[str] = None
    path: Optional[str] = None
    moving: Optional[Dict[str, str]] = None
    handed_step: Optional[int] = None  # the step at which this thread (or task) was handed its work


class Handoff(NamedTuple):
    """What a thread or task inherits from the thread that started it."""

    checkpoint: Any
    via: Optional[str]
    path: Optional[str]
    step: int


def install(rec: Any) -> None:
    """Carry the save a thread or task is started from into it, and hear the job look at a future's error."""
    start = threading.Thread.start

    def start_thread(self: threading.Thread) -> None:
        handoff, run = rec.handoff(), self.run
        self.run = lambda: _carried(rec, handoff, run)  # type: ignore[method-assign]
        start(self)

    submit = concurrent.futures.ThreadPoolExecutor.submit

    def submit_task(self: concurrent.futures.ThreadPoolExecutor, fn: Callable, /, *args: Any, **kwargs: Any):
        handoff = rec.handoff()
        return submit(self, lambda: _carried(rec, handoff, fn, *args, **kwargs))

    result, exception = concurrent.futures.Future.result, concurrent.futures.Future.exception

    def future_result(self: concurrent.futures.Future, timeout: Optional[float] = None) -> Any:
        try:
            return result(self, timeout)
        except BaseException as exc:
            rec.guarded(rec.observed, exc)
            raise

    def future_exception(self: concurrent.futures.Future, timeout: Optional[float] = None) -> Optional[BaseException]:
        exc = exception(self, timeout)
        rec.guarded(rec.observed, exc)
        return exc

    threading.Thread.start = start_thread  # type: ignore[method-assign]
    concurrent.futures.ThreadPoolExecutor.submit = submit_task  # type: ignore[method-assign]
    concurrent.futures.Future.result = future_result  # type: ignore[method-assign]
    concurrent.futures.Future.exception = future_exception  # type: ignore[method-assign]


def _carried(rec: Any, handoff: Handoff, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    rec.guarded(rec.adopt, handoff)
    try:
        return fn(*args, **kwargs)
    finally:
        rec.guarded(rec.task_done, handoff)
