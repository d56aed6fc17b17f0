"""Where a run may write, and the command that holds it there.

Each run starts through ``namespace_helper.py`` with no capability, in PID, IPC, UTS and
cgroup namespaces of its own where the machine allows them, and a mount namespace
where only its sandbox, its events folder and the sandbox's layers can be written
(``/sys`` included); where bubblewrap is installed it builds the namespaces, and
``namespace_helper.py`` only the overlays. ``/tmp``,
``/dev/shm`` and every mapped folder outside the working directory are overlays
whose writes land in the layers (``<sandbox>.layers``), next to the sandbox, so
the faulted run and its resume share them as they share the sandbox. Where no
namespace can be made, the agent refuses writes outside the same folders instead
(Python writes only), so a job that writes outside is stopped, never let through.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Literal, Optional, Sequence, Tuple

from chaosckpt import protocol
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.runs import logcap, namespace_helper
from chaosckpt.conductor.runs.runlog import RunLog

HELPER = Path(__file__).resolve().with_name("namespace_helper.py")
PYTHON = sys.executable
"""The interpreter that runs the helper, outside the namespaces and again inside bubblewrap's: standard library only."""
INPUTS = "inputs.json"
"""The large inputs a sandbox holds as empty stand-ins, kept in its layers folder."""
PRIVATE = ("/tmp", "/dev/shm")
"""Shared scratch folders every run gets a private overlay of."""
TMP = Path(".chaosckpt", "tmp")
"""The job's temporary folder, inside its sandbox: a temporary file renamed into a checkpoint folder stays a
rename (a ``/tmp`` of another mount would make it a copy), and the journal sees it. Never copied between sandboxes."""
JOB_TMPDIR = "/tmp/chaosckpt"
"""The job's ``TMPDIR`` in the namespace: a link in the private ``/tmp`` to ``TMP``, short enough for the
AF_UNIX sockets multiprocessing makes there (108 bytes), which the sandbox's own path may not be."""
Mode = Literal["bubblewrap", "namespaces", "agent"]
"""What held a run: bubblewrap (with ``namespace_helper.py`` inside), ``namespace_helper.py``'s own namespaces, or only the agent."""
CACHES = ("~/.cache",)
"""Folders libraries write behind the job's back (Hugging Face, torch hub, pip): overlaid when they exist."""
_OUTSIDE = (
    re.compile(r"^chaosckpt: refused write outside the sandbox: (.+)$", re.M),
    re.compile(r"Read-only file system: '([^']+)'"),
    re.compile(r"File (/\S+) cannot be opened"),
    re.compile(r"Parent directory (/\S+) does not exist"),
    re.compile(r"(/[^\s:'\"]+): [Rr]ead-only file system"),
)
"""How a refused write shows in a job's error output: Python's OSError, torch's C++ writers, shell tools."""


def layers(cwd: Path) -> Path:
    """The folder holding a sandbox's overlay layers, beside it so the job never lists it."""
    return cwd.parent / f"{cwd.name}.layers"


def _layer(cwd: Path, target: str, instance: str = "") -> Path:
    return layers(cwd) / instance / (target.strip("/").replace("/", "%") or "%")


@functools.lru_cache(maxsize=None)
def bubblewrap() -> Optional[str]:
    """bubblewrap's path where it is installed and builds a run's namespaces here (tried once), else None."""
    found = shutil.which("bwrap") if sys.platform.startswith("linux") else None
    return found if found and _works(pids=True, bwrap=found) else None


@functools.lru_cache(maxsize=None)
def pid_namespace() -> bool:
    """Whether this machine lets chaosckpt give each run a PID namespace of its own too (tried once)."""
    return bubblewrap() is not None or sys.platform.startswith("linux") and _works(pids=True)


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether this machine lets chaosckpt build the mount namespace (tried once, in a throwaway folder)."""
    return pid_namespace() or sys.platform.startswith("linux") and _works(pids=False)


def mode() -> Mode:
    """What holds the runs on this machine."""
    return "bubblewrap" if bubblewrap() else "namespaces" if available() else "agent"


def _works(pids: bool, bwrap: str = "") -> bool:
    """Whether ``true`` runs confined here, with or without a PID namespace, through bubblewrap or not."""
    with tempfile.TemporaryDirectory(prefix="chaosckpt-probe-") as tmp:
        box = Path(tmp) / "box"
        box.mkdir()
        spec = _spec(box, box, [], "", pids, bwrap)
        true = shutil.which("true") or "/bin/true"
        try:
            done = subprocess.run([*_prefix(spec), true], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        ok = done.returncode == 0
        shutil.rmtree(layers(box), ignore_errors=True)
        return ok


def _spec(cwd: Path, log_dir: Path, maps: Sequence[str], instance: str, pids: bool, bwrap: str = "") -> Path:
    lay = layers(cwd)
    (lay / instance).mkdir(parents=True, exist_ok=True)
    overlays = []
    for target in [t for t in PRIVATE if os.path.isdir(t)] + list(maps):
        layer = _layer(cwd, target, instance)
        for part in ("upper", "work"):
            (layer / part).mkdir(parents=True, exist_ok=True)
        link = layer / "upper" / os.path.relpath(JOB_TMPDIR, "/tmp")
        if target == "/tmp" and not os.path.lexists(link):
            link.symlink_to(cwd / TMP)
        overlays.append({"target": target, "upper": str(layer / "upper"), "work": str(layer / "work")})
    inputs = [{"target": str(cwd / rel), "source": real} for rel, real in bound_inputs(cwd).items()]
    spec = {"cwd": str(cwd), "writable": [str(cwd), str(lay), str(log_dir)], "maps": overlays, "inputs": inputs,
            "pids": pids, "bwrap": bwrap, "conductor_env": protocol.ENV_CONDUCTOR}
    path = lay / instance / "namespace_helper.json"
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path


def _prefix(spec: Path) -> List[str]:
    return [PYTHON, "-I", "-S", str(HELPER), str(spec), "--"]


def command(argv: List[str], cwd: Path, log_dir: Path, maps: Sequence[str],
            instance: str = "") -> Tuple[List[str], Dict[str, str]]:
    """The command line and environment that run ``argv`` confined to ``cwd`` (plus ``log_dir`` and ``maps``).

    Runs of one ``instance`` share their private layers (``/tmp``, mapped folders): a faulted run and its
    resume do; the nodes of a multi-node job, which run at once in one sandbox, each have their own."""
    tmp = cwd / TMP
    tmp.mkdir(parents=True, exist_ok=True)
    if available():
        spec = _spec(cwd, log_dir, maps, instance, pid_namespace(), bubblewrap() or "")
        return [*_prefix(spec), *argv], {"TMPDIR": JOB_TMPDIR if os.path.isdir("/tmp") else str(tmp)}
    roots = [str(cwd), str(log_dir)]
    return argv, {"TMPDIR": str(tmp), protocol.ENV_WRITE_ROOTS: os.pathsep.join(roots)}


def host_path(path: str, cwd: Path, maps: Sequence[str]) -> str:
    """Where the file the job sees at ``path`` lies for chaosckpt, outside the namespace: a mapped folder's
    files the job wrote are in its upper layer, the others in the real folder (read, never written)."""
    real = os.path.realpath(path)
    for target in maps:
        if real == target or real.startswith(target.rstrip("/") + "/"):
            upper = _layer(cwd, target) / "upper" / os.path.relpath(real, target)
            if os.path.lexists(upper):
                return str(upper)
    return real


def inside(path: str, folder: Path) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real == root or real.startswith(root.rstrip("/") + "/")


def require_inside(roots: Sequence[str], work: Path) -> None:
    """Refuse to let chaosckpt itself rewrite checkpoint folders (power loss, sweeps) that lead out of the sandbox."""
    outside = [r for r in roots if not inside(r, work)]
    if outside:
        raise UsageError(f"this scenario rewrites the checkpoint folder as a crashed disk would leave it, and "
                         f"{outside[0]} lies outside the working directory; chaosckpt rewrites files only inside "
                         "its sandbox: let the job save under its working directory for power-loss and --sweep")


def _existing(path: str) -> str:
    """``path``'s folder if it exists, else its nearest existing ancestor: what an overlay can cover."""
    folder = os.path.dirname(path.rstrip("/")) or "/"
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder


def outside_writes(stderr: Path, allowed: Iterable[Path]) -> List[str]:
    """Paths outside ``allowed`` that the job's error output says it could not write."""
    text = logcap.tail(stderr, 20000)
    allowed = list(allowed)
    found: List[str] = []
    for pattern in _OUTSIDE:
        for match in pattern.finditer(text):
            path = match.group(1).rstrip(".,;:'\"")
            if os.path.isabs(path) and not any(inside(path, a) for a in allowed) and path not in found:
                found.append(path)
    return found


def refused_writes(events_dir: Path, allowed: Iterable[Path]) -> List[str]:
    """Paths outside ``allowed`` whose writes the system refused, as the agent reported them (``refused`` events):
    each one, whether the job died of it or caught it. The kernel's own file systems (``/proc``, ``/sys``,
    ``/dev``) hold no file of the user's: a write refused there is the job's business."""
    allowed = [*allowed, *map(Path, namespace_helper.VIRTUAL)]
    try:
        paths = RunLog.read(events_dir).refused()
    except (OSError, protocol.ProtocolError):
        return []
    return list(dict.fromkeys(p for p in paths if not any(inside(p, a) for a in allowed)))


def refuse_outside(returncode: Optional[int], stderr: Path, allowed: Iterable[Path],
                   events_dir: Optional[Path] = None) -> None:
    """A usage error when a run wrote outside ``allowed`` (the agent's ``refused`` events in ``events_dir``; for
    writes it cannot see, such as a shell's, the failed run's error output), or could not be confined at all
    (a mapped folder overlayfs refuses, an input bubblewrap cannot bind): the trial cannot go on."""
    if returncode == namespace_helper.UNCONFINED:
        lines = logcap.tail(stderr, 20000).splitlines()
        for at, text in enumerate(lines):
            if text.startswith(namespace_helper.FAILED):
                said = [line for line in lines[:at] if line.startswith("bwrap: ")]
                raise UsageError(text[len("chaosckpt: "):] + (f" ({said[-1]})" if said else ""))
    allowed = list(allowed)
    outside = refused_writes(events_dir, allowed) if events_dir is not None else []
    outside = outside or (outside_writes(stderr, allowed) if returncode else [])
    if outside:
        raise UsageError(refusal(outside))


def refusal(paths: List[str], config_key: str = "map") -> str:
    """The one line saying which writes were refused and how to let them through the sandbox."""
    folders = sorted({_existing(p) for p in paths})
    if not available():
        return (f"the job writes outside its working directory ({', '.join(paths[:3])}), which chaosckpt never lets "
                "it touch, and this machine cannot make a mount namespace to keep those writes in the sandbox "
                "(enable unprivileged user namespaces); make the job write under its working directory")
    options = " ".join(f"--map {f}" for f in folders)
    return (f"the job writes outside its working directory ({', '.join(paths[:3])}"
            f"{', ...' if len(paths) > 3 else ''}), which chaosckpt never lets it touch; give {options} "
            f"(config key {config_key} = {json.dumps(folders)}) to let those writes land in the sandbox instead")


def note(maps: Sequence[str]) -> str:
    """What the preflight says about confinement."""
    if bubblewrap():
        how = "bubblewrap: a read-only root and mount, PID, IPC, UTS and cgroup namespaces of the run's own"
    elif pid_namespace():
        how = "a private mount namespace, in a PID namespace of the run's own (no bubblewrap here)"
    elif available():
        how = "a private mount namespace (no PID namespace here: the job sees the host's processes)"
    else:
        how = "the agent refusing Python writes (no mount namespace here)"
    mapped = f"; writes to {', '.join(maps)} go to overlays in the sandbox" if maps else ""
    return f"writes outside the sandbox are stopped by {how}{mapped}"


def bound_inputs(box: Path) -> Dict[str, str]:
    """The large inputs ``box`` holds as empty stand-ins, by relative path, with the real files."""
    try:
        return json.loads((layers(box) / INPUTS).read_text())
    except (OSError, ValueError):
        return {}
