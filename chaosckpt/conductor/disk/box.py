"""Run a reader of hostile files in a forked child under CPU, memory and wall-clock limits.

A pickle can be built so that reading it, even without running any of it, costs minutes of CPU (tuples hashed as
dict keys) or gigabytes (a deeply nested list): such a file must cost a bounded time and memory and end in a
finding, not hang the CI job. The child gets ``RLIMIT_CPU``, ``RLIMIT_AS`` (its size at the fork plus the budget)
and dies with the parent; the parent kills it at the wall clock. The result comes back as JSON, never a pickle.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import resource
import select
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

MEMORY_BASE = 256 << 20
"""Memory any file may cost, beyond the command's own size (about 230 MB with torch): with it, the reader of a
small file stays under 512 MB in all."""
MEMORY_PER_BYTE_MAX = 1 << 30
"""Bytes of a file that add twice their size to its memory: a pickle's bytes are held whole, but never more than
``--max-inflate`` allows (at most 1 GiB), and tensor data is never held."""
SECONDS_MIN = 20.0
"""The least time a file may take (so that, with the command's start, a bomb's audit ends within 30 s); more for
a large file, whose records are all read once for their CRCs."""
BYTES_PER_SECOND = 50 << 20
_PR_SET_PDEATHSIG = 1
_OUT_OF_MEMORY = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)
"""How C code that finds no memory left (a failed malloc, a stack that cannot grow) ends the child."""


@dataclass(frozen=True)
class Limits:
    """What reading one file or folder may cost: ``seconds`` of CPU and of wall clock, ``memory`` bytes more than
    the process held when it started reading."""

    seconds: float
    memory: int

    @classmethod
    def for_size(cls, size: int, seconds: Optional[float] = None, memory: Optional[int] = None) -> "Limits":
        """The defaults for ``size`` bytes of files, or the figures given."""
        return cls(seconds or SECONDS_MIN + size / BYTES_PER_SECOND,
                   memory or MEMORY_BASE + 2 * min(size, MEMORY_PER_BYTE_MAX))


class LimitReached(Exception):
    """The reader was stopped at a limit: ``which`` (``memory``, ``CPU time``, ``time``) and the figure, in words."""

    def __init__(self, which: str, figure: str) -> None:
        super().__init__(f"{which} past {figure}")
        self.which = which
        self.figure = figure


def human(size: int) -> str:
    """``512 MiB``, ``2 GiB``, ``267.4 MiB``: how a memory limit is shown."""
    if size >= 1 << 30 and size % (1 << 30) == 0:
        return f"{size >> 30} GiB"
    if size >= 1 << 20:
        return f"{size / (1 << 20):.1f}".removesuffix(".0") + " MiB"
    return f"{size} bytes"


def _address_space() -> int:
    """This process's virtual size now, from /proc (RLIMIT_AS counts it, torch's mappings included)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def _child(work: Callable[[], Any], limits: Limits, out: int) -> None:
    """In the forked child: die with the parent, set the limits, run ``work``, write its JSON; never returns."""
    code = 0
    try:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # not Linux: the CPU limit still ends an orphaned child
        cpu = math.ceil(limits.seconds)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (_address_space() + limits.memory,) * 2)
        try:
            answer = {"result": work()}
        except MemoryError:
            answer = {"limit": "memory"}
        data = json.dumps(answer).encode()
    except BaseException:  # noqa: BLE001 - whatever it is, the parent reports it as chaosckpt's own failure
        data = json.dumps({"error": traceback.format_exc()}).encode()
        code = 1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    finally:
        os._exit(code)


def run(work: Callable[[], Any], limits: Limits) -> Any:
    """``work()`` (which returns plain JSON data) run in a child under ``limits``; :class:`LimitReached` when it is
    stopped at one. A failure of ``work`` itself is raised as a RuntimeError with the child's traceback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        _child(work, limits, write)
    os.close(write)
    chunks, killed = [], False
    deadline = time.monotonic() + limits.seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            ready, _, _ = select.select([read], [], [], left)
            if ready:
                chunk = os.read(read, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read)
    if killed:
        raise LimitReached("time", f"{limits.seconds:g} s")
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        raise LimitReached("CPU time", f"{math.ceil(limits.seconds)} s")
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        answer = None
    if not isinstance(answer, dict) and os.WIFSIGNALED(status) and os.WTERMSIG(status) in _OUT_OF_MEMORY:
        raise LimitReached("memory", human(limits.memory))
    if not isinstance(answer, dict):
        raise RuntimeError(f"the audit's reader ended with status {status} and no answer")
    if "limit" in answer:
        raise LimitReached("memory", human(limits.memory))
    if "error" in answer:
        raise RuntimeError(f"the audit's reader failed:\n{answer['error']}")
    return answer["result"]
