"""How a job is invoked, shared by ``run``, ``suite`` and the Python API: its commands and its results folder."""

from __future__ import annotations

import errno
import math
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from chaosckpt.conductor.errors import UsageError, shown
from chaosckpt.conductor.runs import leftovers


def _in_workdir(first: str, path: Path, workdir: Path) -> str:
    """``path`` relative to ``workdir``, which the sandbox copies; a script outside it is a usage error."""
    resolved = path.resolve()
    if workdir not in resolved.parents:
        raise UsageError(f"script {first} is outside the working directory {workdir}, which is what gets copied into the sandbox; run from its directory or pass --workdir")
    return os.path.relpath(resolved, workdir)


def interpreter(path: Path) -> Optional[List[str]]:
    """What runs a script file: its ``#!`` line as the kernel reads it (the interpreter and at most one
    argument), else bash for ``.sh``; None when neither says."""
    with open(path, "rb") as f:
        head = f.readline(256)
    if head.startswith(b"#!"):
        line = head[2:].decode("utf-8", "replace").strip()
        if line:
            return line.split(None, 1)
    if path.suffix == ".sh":
        return ["bash"]
    return None


_PSEUDO = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
                     "tracefs", "configfs", "bpf", "pstore", "efivarfs", "fusectl", "binfmt_misc", "mqueue"})
"""File systems of the kernel's own state: copying one into a sandbox reads processes' memory and devices."""


def _mounts(path: str = "/proc/self/mountinfo") -> List[Tuple[str, str]]:
    """(mount point, file system type) of every mount this process sees; none where that cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) > 4 and rest:
            point = parts[4].encode("utf-8", "surrogateescape").decode("unicode_escape")
            out.append((point, rest.split()[0]))
    return out


def check_workdir(workdir: Path) -> None:
    """A working directory is copied into every sandbox: one that holds the kernel's file systems (``--workdir
    /`` holds ``/proc``) is a usage error, not a copy of every process's memory."""
    root = Path(workdir).resolve()
    for point, kind in _mounts():
        if kind in _PSEUDO and (Path(point) == root or root in Path(point).parents or Path(point) in root.parents):
            raise UsageError(f"the working directory {root} holds {point} (a {kind} file system of the kernel's "
                             "state), and the working directory is copied into each sandbox; give the job's own "
                             "project folder with --workdir")


def job_command(args: Sequence[str], workdir: Path, base: Optional[Path] = None) -> List[str]:
    """The job's command: ``SCRIPT.py [ARGS]`` runs with this Python; another script in the folder runs by its
    ``#!`` line (``.sh``: with bash); anything else runs as given.

    A relative script path is taken from ``base`` (a configuration file's folder), else the current folder.
    """
    check_workdir(workdir)
    if not args:
        raise UsageError("give a training script (chaosckpt run train.py ...) or a command after -- (chaosckpt run ... -- bash train.sh)")
    first = args[0]
    path = Path(first) if base is None else base / first
    if first.endswith(".py"):
        if not path.is_file():
            raise UsageError(f"script {first} does not exist")
        return [sys.executable, _in_workdir(first, path, workdir), *args[1:]]
    if path.is_file() and (workdir in path.resolve().parents or os.sep not in first):
        relative = _in_workdir(first, path, workdir)
        runner = interpreter(path)
        if runner is not None:
            return [*runner, relative, *args[1:]]
        if not os.access(path, os.X_OK):
            raise UsageError(f"script {first} has no #! line saying what runs it and is not executable; "
                             f"add one, or give its interpreter after --, e.g. -- bash {first}")
        return [os.path.join(".", relative), *args[1:]]
    if os.sep not in first and shutil.which(first) is None:
        raise UsageError(f"command {shown(first)} not found on PATH")
    if os.sep in first and not Path(first).exists():
        raise UsageError(f"command {first} does not exist")
    if os.sep in first and (Path(first).is_dir() or not os.access(first, os.X_OK)):
        raise UsageError(f"command {first} is not executable; run it through its interpreter (-- bash {first}) "
                         f"or chmod +x {first}")
    return list(args)


def known_ranks(command: Sequence[str], nproc: Optional[int], nnodes: int = 1) -> Optional[int]:
    """How many ranks the job runs where chaosckpt starts them: ``nproc`` on each of ``nnodes`` machines, or one
    for a SCRIPT.py run as it is; None for a command of the user's own (a launcher after -- starts any number)."""
    if (nproc or 1) > 1 or nnodes > 1:
        return (nproc or 1) * nnodes
    if len(command) > 1 and command[0] == sys.executable and command[1].endswith(".py"):
        return 1
    return None


RANKS_PER_CPU = 4
"""Ranks ``--nproc`` may start per CPU of this machine without ``--force``: CPU jobs are often tested with a few
ranks per core, and a typo of 100000 must not start 100000 processes."""


def check_ranks(ranks: int, force: bool) -> None:
    """Refuse ``ranks`` local ranks past :data:`RANKS_PER_CPU` per CPU this process may use, unless ``force``."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if ranks > RANKS_PER_CPU * cpus and not force:
        raise UsageError(f"--nproc would start {ranks} ranks on this machine, which has {cpus} CPUs: at most "
                         f"{RANKS_PER_CPU * cpus} ({RANKS_PER_CPU} per CPU) without --force")


def check_seconds(option: str, value: float) -> None:
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} {value:g} is invalid: a run needs a finite time limit; give seconds > 0")


def check_tolerance(option: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{option} {value:g} is invalid: use 0 for bitwise or a finite positive relative tolerance")


def excluded(paths: Sequence[Path], workdir: Path) -> List[Path]:
    """``--exclude`` values: paths under the working directory (relative ones are taken from it)."""
    out = []
    for p in paths:
        full = Path(os.path.abspath(workdir / p))
        if full == workdir or workdir not in full.parents:
            raise UsageError(f"--exclude {p} is not under the working directory {workdir}; give a path inside it, "
                             "such as --exclude ckpt")
        out.append(full)
    return out


def resume_command(command: List[str], resume_args: Optional[Sequence[str]], resume_cmd: Optional[Sequence[str]]) -> List[str]:
    """The resume run's command: ``resume_cmd`` instead of the job's, or the job's with ``resume_args`` appended."""
    if resume_cmd is not None and resume_args is not None:
        raise UsageError("give --resume-cmd or --resume-args, not both")
    resume = list(resume_cmd) if resume_cmd is not None else command + list(resume_args or ())
    if not resume:
        raise UsageError("--resume-cmd is empty")
    return resume


def results_dir(out: Path, name: str) -> Path:
    """A new folder ``out/<timestamp>-<name>``, numbered when the name is taken, owned by this process; what
    killed runs left under ``out`` is cleaned up first (see ``leftovers``). A full disk is an ``OSError`` (ENOSPC)
    naming the folder, for an inconclusive exit, and leaves neither folder nor lock behind."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        out.mkdir(parents=True, exist_ok=True)
        leftovers.report(out)
        for n in range(1000):
            path = out / (f"{stamp}-{name}" + (f"-{n}" if n else ""))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            try:
                leftovers.claim(path)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            return path.resolve()
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, exc.strerror, str(out / name)) from None
        raise UsageError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    raise UsageError(f"cannot find a free results folder name under {out}")


def split(option: str, value: Optional[str]) -> Optional[List[str]]:
    """A command-line option holding a command (``--resume-cmd 'bash resume.sh'``), split like a shell would."""
    if value is None:
        return None
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise UsageError(f"{option} {shown(value)} is not a valid command line: {exc}") from None


def split_tuple(option: str, value: Optional[str]) -> Optional[Tuple[str, ...]]:
    """``split`` as the configuration holds commands: a tuple."""
    split_value = split(option, value)
    return tuple(split_value) if split_value is not None else None


def ckpt_dirs(dirs: Sequence[str], workdir: Path) -> List[str]:
    """``--ckpt-dir`` values as paths relative to the working directory, which must contain them."""
    out = []
    for d in dirs:
        resolved = (workdir / d).resolve()
        if resolved != workdir and workdir not in resolved.parents:
            raise UsageError(f"--ckpt-dir {d} is outside the working directory {workdir}")
        out.append(os.path.relpath(resolved, workdir))
    return out


def with_ranks(command: List[str], nproc: Optional[int]) -> List[str]:
    """``--nproc N`` (or ``nproc`` in the config): the script's command run as N local ranks by torch.distributed.run."""
    if nproc is None:
        return command
    if nproc < 1:
        raise UsageError(f"--nproc {nproc} is invalid: give the number of ranks, 1 or more")
    if command[0] != sys.executable or not command[1].endswith(".py"):
        raise UsageError("--nproc runs a SCRIPT.py; to start ranks your own way, give the launcher after --, "
                         "e.g. -- torchrun --nproc_per_node 2 train.py")
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--standalone", *command[1:]]
