"""Why a resumed run exited non-zero after it had loaded: which rank, which exception, after which step, where.

The agent records the exception a process ends on (its type, its first line, the step count, the
frames); the frame named is the innermost one in the job's own code, not in a library or Python.
"""

from __future__ import annotations

import os
import sysconfig
from typing import Dict, Optional

from chaosckpt.conductor.result import Finding
from chaosckpt.conductor.runlog import ProcessLog, RunLog

_LIBRARY_ROOTS = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _is_job_file(path: str) -> bool:
    if path.startswith("<") or "site-packages" in path or "dist-packages" in path:
        return False
    return not os.path.realpath(path).startswith(_LIBRARY_ROOTS)


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
