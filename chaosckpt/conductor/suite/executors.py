"""Where a suite's workers run: processes on this machine, or Slurm jobs (``suite --executor slurm``).

Both hand the suite a handle that answers as ``subprocess.Popen`` does (``poll``, ``send_signal``, ``kill``,
``wait``, ``returncode``), so the suite starts, watches and stops trials the same way on either. A Slurm worker is
one ``sbatch`` job running ``python -m chaosckpt.conductor.suite.worker SPEC`` on a machine of the cluster, which
must see the suite's folder and the project at the same paths (a shared file system) and the same Python. Its job
id is kept in the trial's folder (``slurm.json``), so a suite resumed after chaosckpt itself was killed waits for
the jobs still queued or running instead of submitting them again. A trial whose job ended without a verdict
(cancelled, timed out, preempted, its node failed) gets an inconclusive verdict naming the Slurm state.
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.suite_plan import scenario_label
from chaosckpt.conductor.runs import launcher, leftovers, slurm

EXECUTORS = ("local", "slurm")
POLL_S = 1.0
"""How often a Slurm job's state is asked for."""
SLURM_TABLE = {"partition": "--partition", "nodes": "--nodes", "gpus": "--gpus", "time": "--time",
               "cpus": "--cpus-per-task", "mem": "--mem", "account": "--account", "qos": "--qos"}
"""Keys of ``[tool.chaosckpt.slurm]`` and the ``sbatch`` option each gives; ``args`` adds options as written."""


def worker_argv(spec: Path) -> List[str]:
    return [sys.executable, "-m", "chaosckpt.conductor.suite.worker", str(spec)]


class Local:
    """Workers as processes of this machine, in their own session, dying with the suite."""

    name = "local"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def start(self, spec: Path) -> subprocess.Popen:
        with open(spec.parent / "worker.log", "wb") as log:
            return subprocess.Popen(
                worker_argv(spec), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=launcher.die_with_parent(signal.SIGINT),  # a killed suite leaves no job behind
                pass_fds=leftovers.held_fds(self.folder),  # the suite stays locked until its last worker is gone
            )

    def adopt(self, folder: Path) -> None:
        """A local worker dies with the suite that started it: there is never one to wait for."""
        return None

    def check(self) -> None:
        """This machine can always run workers."""


def sbatch_args(table: Dict[str, Any], extra: Sequence[str] = ()) -> List[str]:
    """The ``sbatch`` options of a ``[tool.chaosckpt.slurm]`` table, then ``extra`` (``--slurm-args``)."""
    argv = [f"{SLURM_TABLE[key]}={value}" for key, value in table.items() if key in SLURM_TABLE]
    given = table.get("args", [])
    argv += shlex.split(given) if isinstance(given, str) else list(given)
    return argv + list(extra)


class SlurmJob:
    """One worker submitted as a Slurm job, watched as a process is."""

    def __init__(self, job_id: str, folder: Path) -> None:
        self.job_id, self.folder = job_id, folder
        self.returncode: Optional[int] = None
        self.state = "PENDING"
        self._asked = 0.0

    def poll(self) -> Optional[int]:
        if self.returncode is not None or time.monotonic() - self._asked < POLL_S:
            return self.returncode
        self._asked = time.monotonic()
        self.state, status = slurm.job_state(self.job_id)
        if self.state not in slurm.ACTIVE:
            self.returncode = status if status is not None else 1
            if not (self.folder / "result.json").exists():
                ended_without_verdict(self.folder, self.job_id, self.state, status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Stop the trial as Ctrl-C would: Slurm sends its worker SIGTERM, which kills the job tree, then SIGKILL."""
        slurm.scheduler(["scancel", self.job_id])

    def kill(self) -> None:
        slurm.scheduler(["scancel", "--signal=KILL", "--full", self.job_id])

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"slurm job {self.job_id}", timeout or 0)
            time.sleep(POLL_S / 4)
        return self.returncode


class Slurm:
    """Workers as Slurm jobs, each submitted with ``sbatch`` and the suite's options for it."""

    name = "slurm"

    def __init__(self, folder: Path, args: Sequence[str] = ()) -> None:
        self.folder, self.args = folder, list(args)

    def check(self) -> None:
        """Refuse the suite before its reference runs when Slurm's commands are missing or its controller is down."""
        answer = slurm.scheduler(["scontrol", "ping"], timeout=30)
        if answer.returncode != 0 or "UP" not in answer.stdout:
            why = (answer.stderr.strip() or answer.stdout.strip() or f"exit status {answer.returncode}").splitlines()[-1]
            raise UsageError(f"--executor slurm cannot reach the Slurm controller (scontrol ping: {why}); run the "
                             "suite where jobs are submitted, or use --executor local")

    def start(self, spec: Path) -> SlurmJob:
        folder = spec.parent
        argv = ["sbatch", "--parsable", f"--job-name=chaosckpt-{folder.name}", f"--output={folder / 'worker.log'}",
                f"--chdir={folder}", "--export=ALL", *self.args, "--wrap", "exec " + shlex.join(worker_argv(spec))]
        done = slurm.scheduler(argv)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise UsageError(f"sbatch refused the trial's job ({why}); check --slurm-args and [tool.chaosckpt.slurm]")
        job_id = done.stdout.strip().split(";")[0]
        atomic.write_text(folder / slurm.SUBMITTED, json.dumps({"job_id": job_id}) + "\n")
        return SlurmJob(job_id, folder)

    def adopt(self, folder: Path) -> Optional[SlurmJob]:
        """The job a killed suite submitted for ``folder`` while it is still queued or running; None otherwise."""
        job_id = slurm.active_job(folder)
        return None if job_id is None else SlurmJob(job_id, folder)


def executor(name: str, folder: Path, args: Sequence[str] = ()) -> Any:
    """The executor called ``name`` for the suite in ``folder``."""
    return Slurm(folder, args) if name == "slurm" else Local(folder)


def ended(job_id: str, state: str, status: Optional[int]) -> str:
    """How a Slurm job ended, in words: ``Slurm job 12 was cancelled``."""
    how = {"CANCELLED": "was cancelled", "TIMEOUT": "reached its time limit", "PREEMPTED": "was preempted",
           "NODE_FAIL": "lost its node", "OUT_OF_MEMORY": "ran out of memory", "BOOT_FAIL": "could not boot its node",
           "DEADLINE": "passed its deadline"}.get(state, f"ended {state}")
    code = f" with exit status {status}" if status and state in ("FAILED", "COMPLETED") else ""
    return f"Slurm job {job_id} {how}{code}"


def ended_without_verdict(folder: Path, job_id: str, state: str, status: Optional[int]) -> None:
    """The trial's inconclusive verdict when its Slurm job ended and its worker wrote none (a shared faulted run's
    folder gets none: its trials then run their own fault)."""
    from chaosckpt.conductor.results.result import Trial, document
    from chaosckpt.conductor.trial.render import headline

    try:
        spec = json.loads((folder / "spec.json").read_text())
    except (OSError, ValueError):
        return
    if "options" not in spec or spec["options"].get("prefix") == str(folder):
        return  # a reference run's job, or a shared faulted run's
    detail = f"{ended(job_id, state, status)} before the trial had a verdict (see {folder / 'worker.log'})"
    trial = Trial(scenario=scenario_label(spec["scenario"]), status="inconclusive", headline="",
                  reason="slurm-job-ended", detail=detail, params=spec["params"], results_dir=str(folder))
    trial.headline = headline(trial)
    atomic.write_text(folder / "result.json", json.dumps(document([trial]), indent=2) + "\n")
