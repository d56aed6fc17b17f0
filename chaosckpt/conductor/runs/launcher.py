"""Starting a job's process tree with the agent injected, watching it, and killing all of it.

Every run gets a marker in its environment; after a SIGKILL of the tree the
conductor also looks for processes carrying the marker, because torchrun puts
each rank in a session of its own, and reports any that survived.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import psutil

import chaosckpt
from chaosckpt import protocol
from chaosckpt.conductor.runs import confinement, logcap, signalling

POLL_S = 0.01
HOLD_S = 30.0
HOLD_POLL_S = 0.05
STOP_HOLD_S = 2.0
"""How long a job stopped at its horizon is kept for its other ranks to reach the horizon too."""
BOOT_DIR = Path(chaosckpt.__file__).resolve().parent / "agent" / "boot"
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_PDEATHSIG = 1


@dataclass
class RunSpec:
    """One process tree to start."""

    name: str
    argv: List[str]
    cwd: Path
    log_dir: Path
    timeout_s: float
    fault: Optional[protocol.FaultSpec] = None
    env: Dict[str, str] = field(default_factory=dict)
    hold: Optional[Callable[[Path], bool]] = None
    """After a fault fires, the kill waits (at most ``HOLD_S``) until this is true of the events folder."""
    stop: Optional[Dict] = None
    """The horizon (``CHAOSCKPT_STOP``): the job is killed once it reports having reached it."""
    watch: Optional[Callable[[Path, float], None]] = None
    """Called with the events folder and the seconds elapsed while the job runs (a progress line)."""
    maps: List[str] = field(default_factory=list)
    """Folders outside ``cwd`` the job may write through overlays kept in the sandbox (see ``confinement``)."""
    layers: str = ""
    """Whose private layers (``/tmp``, mapped folders) the run uses: one node's of a multi-node job, or the trial's."""
    preempt: Optional[signalling.Preemption] = None
    """When the fault fires, the job is signalled and given a grace period (``signalling``) before the SIGKILL."""


@dataclass
class RunResult:
    spec: RunSpec
    returncode: Optional[int]
    duration_s: float
    timed_out: bool
    fault_fired: bool
    survivors: List[int]
    stopped: bool = False
    """The job reached its horizon and was killed there: not a crash."""
    log_error: Optional[OSError] = None
    """Why the job's output could not all be written to its logs (a full disk), if it could not."""
    confinement: Optional[str] = None
    """What held the job (``confinement.Mode``; None: a multi-node run, held by each node's machine)."""
    preempted: Optional[Dict] = None
    """The preemption's signal and grace, as ``signalling.deliver`` saw them, when the fault was one."""

    @property
    def events_dir(self) -> Path:
        return self.spec.log_dir / "events"

    @property
    def stdout(self) -> Path:
        return self.spec.log_dir / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.spec.log_dir / "stderr.log"


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """While a tree runs, keep its orphaned grandchildren under this process, so a killed tree cannot hide
    from us; afterwards the flag is as it was, because the Python API runs inside the user's process."""
    libc, before = None, ctypes.c_int(1)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            libc = None
    try:
        yield
    finally:
        if libc is not None and not before.value:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def die_with_parent(signum: int) -> Callable[[], None]:
    """A ``preexec_fn`` that has the child sent ``signum`` when this process dies, even by SIGKILL."""
    parent = os.getpid()

    def arm() -> None:
        if sys.platform.startswith("linux"):
            try:
                ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
            except (OSError, AttributeError):
                pass
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(128 + signum)

    return arm


def job_env(spec: RunSpec, events_dir: Path, mark: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(spec.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), env.get("PYTHONPATH", "")) if p)
    env[protocol.ENV_RUN_DIR] = str(events_dir)
    env[protocol.ENV_MARK] = mark
    env[protocol.ENV_CONDUCTOR] = str(os.getpid())
    env.pop(protocol.ENV_FAULT, None)
    env.pop(protocol.ENV_STOP, None)
    if spec.fault is not None:
        env[protocol.ENV_FAULT] = protocol.encode_fault(spec.fault)
    if spec.stop is not None:
        env[protocol.ENV_STOP] = json.dumps(spec.stop)
    return env


def _marked(mark: str) -> List[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(protocol.ENV_MARK) == mark:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _alive(proc: Union[psutil.Process, int, None]) -> bool:
    """Whether ``proc`` (a process, or a pid as this process sees it) runs: it exists and is no zombie."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _in_namespace(namespace: Optional[str]) -> List[psutil.Process]:
    """The processes in the mount namespace ``namespace`` (``mnt:[N]``): a confined job's, however detached."""
    found = []
    for pid in psutil.pids() if namespace else ():
        try:
            if pid != os.getpid() and os.readlink(f"/proc/{pid}/ns/mnt") == namespace:
                found.append(psutil.Process(pid))
        except (OSError, psutil.Error):
            continue
    return found


def job_namespace(pid: int) -> Optional[Tuple[str, int]]:
    """The mount namespace of the job's first process, as the kernel names it, once confinement has put it in one
    of its own (None before that, or unconfined): the job's processes share it whatever else they shed. It comes
    with an open handle on it, to close after ``kill_tree``: the kernel gives a namespace's number to a new one once
    nothing holds the old, and a number read without the handle could name another job's by the time it is used."""
    try:
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    namespace = os.readlink(f"/proc/self/fd/{fd}")
    if namespace == os.readlink("/proc/self/ns/mnt"):
        os.close(fd)
        return None
    return namespace, fd


def own_pid(pid: int) -> Optional[int]:
    """The pid process ``pid`` (as this process sees it) has in its own PID namespace: the pid a confined job's
    process names itself by (the same where it has no namespace of its own); None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return pid


def namespace_init(root: psutil.Process) -> Optional[psutil.Process]:
    """The first process of the job's PID namespace (a child of the confinement helper ``root``, or of the
    bubblewrap it started), or None where the job has none: when it dies, the kernel kills every process in the
    namespace, however detached."""
    try:
        children = root.children()
        below = [g for c in children for g in c.children()]
    except psutil.Error:
        return None
    return next((c for c in children + below if own_pid(c.pid) == 1), None)


def job_processes(root: psutil.Process) -> Dict[int, psutil.Process]:
    """The live processes under ``root`` by the pid they know themselves by (the pids in event files)."""
    try:
        found = [root] + root.children(recursive=True)
    except psutil.Error:
        return {}
    out = {}
    for proc in found:
        pid = own_pid(proc.pid)
        if pid is not None:
            out.setdefault(pid, proc)
    return out


def kill_tree(root: psutil.Process, mark: str, namespace: Optional[str] = None) -> List[int]:
    """SIGKILL the first process of the job's PID namespace (the kernel then kills the whole namespace), then
    ``root``, its descendants, every process carrying ``mark`` and every process in the job's mount ``namespace``
    (where the job has no PID namespace: a daemon that left the session and cleared its environment); return the
    pids still alive."""
    first = namespace_init(root)
    if first is not None:
        try:
            first.kill()
        except psutil.Error:
            pass
    procs: Dict[int, psutil.Process] = {}
    for _ in range(2):  # suspend, then rescan for children spawned meanwhile
        try:
            found = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            found = []
        for proc in found + _marked(mark) + _in_namespace(namespace):
            if proc.pid not in procs:
                procs[proc.pid] = proc
                try:
                    proc.suspend()
                except psutil.Error:
                    pass
    for proc in procs.values():
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        alive = [p for p in procs.values() if _alive(p)] + [p for p in _marked(mark) if _alive(p) and p.pid not in procs]
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        if not alive:
            break
        time.sleep(POLL_S)
    _reap(procs, exclude=root.pid)
    return sorted(p.pid for p in procs.values() if _alive(p)) + sorted(
        p.pid for p in _marked(mark) if _alive(p) and p.pid not in procs
    )


def _reap(procs: Dict[int, psutil.Process], exclude: int) -> None:
    """Collect the exit status of killed orphans that were re-parented to us."""
    for pid in procs:
        if pid == exclude:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def wait_before_kill(spec: RunSpec, events_dir: Path, started: float, hold: Optional[Callable[[Path], bool]],
                     limit_s: float = HOLD_S) -> None:
    """Keep the halted job alive (at most ``limit_s``) until the rest of it reaches the point ``hold`` wants."""
    if hold is None:
        return
    deadline = min(time.monotonic() + limit_s, started + spec.timeout_s)
    while time.monotonic() < deadline and not hold(events_dir):
        time.sleep(HOLD_POLL_S)


def _all_stopped(events_dir: Path, root: psutil.Process) -> bool:
    """Every live process under ``root`` that records events has reached the horizon too (the other ranks of a
    job); event files name processes by their pid in the job's PID namespace."""
    flagged = {p.name[len(protocol.STOP_FLAG_PREFIX):] for p in protocol.fault_flags(events_dir, protocol.STOP_FLAG_PREFIX)}
    live = job_processes(root) if namespace_init(root) is not None else None
    for path in protocol.event_files(events_dir):
        pid = path.name.split(".")[2]
        if pid not in flagged and pid.isdigit() and _alive(live.get(int(pid)) if live is not None else int(pid)):
            return False
    return True


def reap(proc: Any) -> Optional[int]:
    """Wait for a killed ``proc`` to end without ``Popen``'s lock: Ctrl-C or SIGTERM raised inside
    ``Popen.poll()`` can leave that lock held, and ``Popen.wait()`` then blocks for ever (a suite interrupted
    during its reference run hung so). A process the interrupted poll had already collected counts as killed.
    Any other handle (a Slurm job) is waited for as it waits."""
    if not isinstance(proc, subprocess.Popen):
        return proc.wait()
    if proc.returncode is None:
        try:
            _, status = os.waitpid(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            proc.returncode = -signal.SIGKILL
    return proc.returncode


def launch(spec: RunSpec) -> RunResult:
    """Run ``spec`` to completion, a fired fault, or its timeout; the tree is always gone afterwards."""
    with subreaper():
        return _run(spec)


def spawn(spec: RunSpec, events_dir: Path, mark: str) -> Tuple[subprocess.Popen, logcap.CappedLog, logcap.CappedLog]:
    """Start the job's tree confined to its sandbox (see ``confinement``), in a session of its own, killed
    with this process, its output capped into ``stdout.log`` and ``stderr.log``: the process and both logs."""
    env = job_env(spec, events_dir, mark)
    argv, confined_env = confinement.command(spec.argv, spec.cwd, spec.log_dir, spec.maps, spec.layers)
    env.update({k: v for k, v in confined_env.items() if k not in spec.env})
    out, out_log = logcap.pipe_into(spec.log_dir / "stdout.log")
    err, err_log = logcap.pipe_into(spec.log_dir / "stderr.log")
    try:
        try:
            proc = subprocess.Popen(
                argv, cwd=spec.cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent(signal.SIGKILL),
            )
        finally:
            os.close(out)
            os.close(err)
    except OSError:
        out_log.close()
        err_log.close()
        raise
    return proc, out_log, err_log


def _run(spec: RunSpec) -> RunResult:
    spec.log_dir.mkdir(parents=True, exist_ok=True)
    events_dir = spec.log_dir / "events"
    events_dir.mkdir(exist_ok=True)
    mark = uuid.uuid4().hex
    started = time.monotonic()
    proc, out_log, err_log = spawn(spec, events_dir, mark)
    root = psutil.Process(proc.pid)
    timed_out = fault_fired = stopped = False
    survivors: List[int] = []
    preempted: Optional[Dict] = None
    namespace: Optional[Tuple[str, int]] = None
    try:
        while proc.poll() is None:
            namespace = namespace or job_namespace(proc.pid)
            if protocol.fault_flags(events_dir):
                fault_fired = True
                if spec.preempt is not None:
                    preempted = signalling.deliver(spec.preempt, spec.argv, events_dir, job_processes(root),
                                                   lambda: proc.poll() is not None, started + spec.timeout_s)
                else:
                    wait_before_kill(spec, events_dir, started, spec.hold)
                break
            if protocol.fault_flags(events_dir, protocol.STOP_FLAG_PREFIX):
                stopped = True
                wait_before_kill(spec, events_dir, started, lambda d: _all_stopped(d, root), STOP_HOLD_S)
                break
            if time.monotonic() - started > spec.timeout_s:
                timed_out = True
                break
            if spec.watch is not None:
                spec.watch(events_dir, time.monotonic() - started)
            time.sleep(POLL_S)
    finally:
        survivors = kill_tree(root, mark, namespace[0] if namespace else None)
        if namespace:
            os.close(namespace[1])
        reap(proc)
        out_log.close()
        err_log.close()
    if not fault_fired and protocol.fault_flags(events_dir):
        fault_fired = True
    return RunResult(spec, proc.returncode, time.monotonic() - started, timed_out, fault_fired, survivors, stopped,
                     out_log.error or err_log.error, confinement.mode(), preempted)
