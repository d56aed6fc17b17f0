"""Asking Slurm about a job: the commands every part of chaosckpt that submits or spares Slurm jobs shares."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import List, Optional, Tuple

from chaosckpt.conductor.errors import UsageError

ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
"""Slurm job states of a job that has not ended (``squeue``'s long names)."""
SUBMITTED = "slurm.json"
"""The trial folder's record of its Slurm job: ``{"job_id": "1234"}``."""


def scheduler(argv: List[str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run one of Slurm's commands; a missing command is a usage error, one that does not answer a failure."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise UsageError(f"--executor slurm needs Slurm's {argv[0]} command, which is not on the PATH; run the suite "
                         "where jobs are submitted (a login node), or use --executor local") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} did not answer in {timeout:g} s")


def job_state(job_id: str) -> Tuple[str, Optional[int]]:
    """The job's Slurm state and, once it ended, its exit status: from ``scontrol``, which remembers a job a
    while after it ends, else from ``sacct`` where accounting keeps it; ``UNKNOWN`` when neither knows the job."""
    shown = scheduler(["scontrol", "-o", "show", "job", job_id])
    if shown.returncode == 0 and "JobState=" in shown.stdout:
        fields = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)
        return fields["JobState"], exit_status(fields.get("ExitCode", ""))
    listed = scheduler(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"])
    first = listed.stdout.strip().splitlines()[:1] if listed.returncode == 0 else []
    if first and "|" in first[0]:
        state, code = first[0].split("|", 1)
        return state.split()[0], exit_status(code)
    return "UNKNOWN", None


def exit_status(code: str) -> Optional[int]:
    """``ExitCode=1:0`` (status:signal) as the worker's exit status; a signal as 128 + its number."""
    status, _, sig = code.partition(":")
    if not status.isdigit():
        return None
    return 128 + int(sig) if sig.isdigit() and int(sig) else int(status)


def active_job(folder: Path) -> Optional[str]:
    """The id of the Slurm job ``folder`` was submitted as (its ``slurm.json``) while it is queued or running."""
    try:
        job_id = str(json.loads((folder / SUBMITTED).read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        state, _ = job_state(job_id)
    except UsageError:  # Slurm's commands are not here: nothing here can be waiting for that job
        return None
    return job_id if state in ACTIVE else None
