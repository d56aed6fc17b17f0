"""Why a run exited non-zero: which rank, which exception, after which step, where; or a crash that struck
only after the job's script had ended.

The agent records the exception a process ends on (its type, its first line, the step count, the
frames); the frame named is the innermost one in the job's own code, not in a library or Python.
It also records that a script ended (``exit``): a process killed by a signal after that died in the
interpreter's shutdown (a native library's teardown), with its work done and recorded.
"""

from __future__ import annotations

import os
import re
import signal
import sysconfig
from pathlib import Path
from typing import Dict, Optional

import chaosckpt
from chaosckpt.conductor.results.result import Finding
from chaosckpt.conductor.runs import logcap
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog

_LIBRARY_ROOTS = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
    os.path.dirname(os.path.abspath(chaosckpt.__file__))})
"""Python's, the installed packages' and chaosckpt's own (the agent's wrappers sit in the job's frames)."""


def _is_job_file(path: str) -> bool:
    if path.startswith("<") or "site-packages" in path or "dist-packages" in path:
        return False
    return not os.path.realpath(path).startswith(_LIBRARY_ROOTS)


_LAUNCHER_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
"""torchrun's failure summary, one entry per failed process: ``exitcode  : -6 (pid: 9085)``."""


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def ended(returncode: Optional[int], duration_s: float, stderr: Path) -> str:
    """How a run that left no events ended, in words: its status or the signal that killed it, after how long,
    and its last line on stderr when it printed one."""
    how = f"was killed by {_signal_name(returncode)}" if returncode and returncode < 0 else f"exited with status {returncode}"
    last = logcap.last_line(stderr, 300)
    return f"it {how} after {duration_s:.1f} s, " + (f"its last line: {last}" if last else "printing nothing")


def after_exit(log: RunLog, returncode: Optional[int], stderr: Path, run: str) -> Optional[Finding]:
    """A ``crash-at-exit`` finding when a run's non-zero status comes only from processes killed by a signal
    after their script had ended, every process having ended its script without an exception; else None.

    The process's own status is the run's for a job without a launcher; under torchrun, its summary of
    the failed processes is read from the end of the run's stderr."""
    if not returncode or not log.processes or any(p.uncaught is not None or not p.ended for p in log.processes):
        return None
    ours = {p.pid: p for p in log.processes}
    if returncode < 0 and len(ours) == 1:
        failed = {next(iter(ours)): returncode}
    else:
        failed = {int(pid): int(code) for code, pid in _LAUNCHER_EXIT.findall(logcap.tail(stderr))}
    if not failed or any(code >= 0 or pid not in ours for pid, code in failed.items()):
        return None
    if log.world_size() > 1:
        ranks = sorted(failed.items(), key=lambda item: ours[item[0]].rank or 0)
        how = ": " + " and ".join(f"rank {ours[pid].rank or 0} by {_signal_name(code)}" for pid, code in ranks)
    else:
        how = f" by {_signal_name(next(iter(failed.values())))}"
    return Finding(
        "crash-at-exit",
        f"{run} was killed after its script had finished, in the interpreter's shutdown{how} (see {stderr}); its "
        "steps were all recorded, so the trial is judged, but a scheduler counts the job as failed: release "
        "native resources before exit (torch.distributed.destroy_process_group(), join worker threads)",
        {"returncode": returncode, "signals": {str(pid): _signal_name(code) for pid, code in failed.items()}},
    )


def job_frame(proc: ProcessLog) -> Optional[Dict]:
    """The innermost frame of the job's own code in the exception the process ended on."""
    frames = (proc.uncaught or {}).get("frames", [])
    ours = [f for f in frames if _is_job_file(f["file"])]
    return ours[-1] if ours else None


def _where(frame: Dict, cwd: Optional[str]) -> str:
    path = frame["file"]
    if cwd and os.path.isabs(path) and path.startswith(cwd.rstrip(os.sep) + os.sep):
        path = os.path.relpath(path, cwd)
    func = "the script's top level" if frame["func"] == "<module>" else f"{frame['func']}()"
    return f"in {func} ({path} line {frame['line']})"


def resume_exit(resume: RunLog, returncode: Optional[int], starts: Dict[int, Optional[int]],
                stderr_tail: str) -> Optional[Finding]:
    """A ``resume-exited`` finding when the resumed run ended with a non-zero status; None when it exited 0.

    ``starts``: per rank (0 for a job without ranks), the step the rank resumed from, to give global steps."""
    if not returncode:
        return None
    failed = sorted((p for p in resume.processes if p.uncaught is not None), key=lambda p: p.uncaught["ts"])
    multi = resume.world_size() > 1
    if not failed:
        detail = f": {stderr_tail}" if stderr_tail else ""
        return Finding("resume-exited", f"the resumed run exited with status {returncode}{detail}",
                       {"returncode": returncode})
    proc = failed[0]
    event = proc.uncaught
    rank = proc.rank or 0
    start = starts.get(rank)
    step = (start or 0) + event["step"] if event["step"] else None
    who = f"rank {rank} of the resumed run" if multi else "the resumed run"
    when = f" after step {step}" if step is not None else " before its first step"
    frame = job_frame(proc)
    where = f" {_where(frame, (proc.hello or {}).get('cwd'))}" if frame else ""
    evidence = {"returncode": returncode, "exception": event["exc"], "error": event["error"], "step": step,
                "rank": rank if multi else None}
    if frame:
        evidence.update(function=frame["func"], file=frame["file"], line=frame["line"])
    return Finding("resume-exited", f"{who} exited with status {returncode} on {event['error']}{when}{where}",
                   evidence)
