"""Start a job in namespaces of its own where only its sandbox can be written, holding no capability.

Run as ``python -I -S namespace_helper.py SPEC.json -- COMMAND...`` (standard library only,
so it starts in a few milliseconds without chaosckpt on the path). The job sees
every mount read-only except:

- the ``writable`` folders (the run's sandbox and its events folder), bound onto themselves;
- ``/tmp`` and ``/dev/shm``, bound to folders of the sandbox's layers;
- large ``inputs`` of the working directory, bound read-only over their empty stand-ins in the sandbox;
- each ``map`` folder outside the sandbox, covered by an overlay whose upper layer
  lives in the sandbox's layers, so the job's writes there land in the sandbox and
  the real folder is never modified.

A write anywhere else, ``/sys`` included, fails with EROFS. As root a mount namespace is
enough; any other user gets an unprivileged user namespace mapping it to root. The job
holds no capability at all (bounding, ambient, effective, permitted and inheritable sets
cleared, no-new-privileges set), so neither it nor a set-user-ID program it runs can undo
the mounts or reach past them (``open_by_handle_at``, device nodes, raw I/O, tracing).

Where the spec names ``bwrap`` (bubblewrap), this helper only builds the overlays in a
mount namespace of its own and hands the rest to bubblewrap, as Flatpak does: a read-only
view of the root, its own ``/dev`` and ``/proc``, and mount, PID, IPC, UTS and cgroup
namespaces; inside it this file runs again (``--init``) as the namespace's first process.
Without bubblewrap the helper builds the same itself (``/dev`` a small file system of its
own holding only the devices a training job uses: ``null``, ``zero``, ``random``,
terminals, GPUs).

With ``"pids": true`` in the spec (always with bubblewrap) the job gets a PID namespace:
the helper stays outside it and waits (``relay``); the namespace's first process (``init``)
runs the command as its own child, pid 2, so no other process's root or working directory
can be reached through ``/proc/<pid>``. When the first process ends, or dies with the
helper, the kernel kills every process of the namespace. Without it the helper ``exec``s
the command, which keeps its pid. Exit status 125 with one line on stderr means the
namespaces could not be made.
"""

from __future__ import annotations

import ctypes
import fnmatch
import json
import os
import resource
import signal
import socket
import sys
from typing import Dict, List, NoReturn, Optional

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
ISOLATED = CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
"""The namespaces a job gets besides mount and PID: its System V IPC objects, host name and cgroup view die with it."""
UNCONFINED = 125
"""Exit status of the helper when it cannot build the namespace; nothing of the job ran."""
FAILED = "chaosckpt: cannot confine the job to its sandbox: "
"""Starts the helper's one line when it exits ``UNCONFINED``."""
STARTED = b"+"
"""What the namespace's first process tells the helper once the namespaces are built, before the job starts."""
VIRTUAL = ("/proc", "/sys", "/dev")
"""Kernel file systems: they hold no user files. ``/dev`` and ``/proc`` are replaced by the job's own, ``/sys`` is
made read-only (cgroups, kernel settings) with everything else."""
DEVICES = ("null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "nvidia*", "dri", "kfd", "infiniband")
"""The entries of the host's ``/dev`` a job's ``/dev`` carries: no block devices, no raw disk or memory access."""
BWRAP_DEVICES = ("nvidia*", "dri", "kfd", "infiniband")
"""The ``DEVICES`` bubblewrap's own ``/dev`` lacks, bound from the host's."""
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""Signals sent to the helper that reach the job: through the helper, then the namespace's first process."""
KERNEL_SETTINGS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
"""What a root job must not write in the host's ``/proc`` (kernel settings, a core pattern that runs a program as
host root, the magic keys): read-only where the job has no ``/proc`` of its own."""
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def enter_namespace(flags: int) -> None:
    """The namespaces of ``flags`` (a private mount namespace among them), a user namespace first when not root."""
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _check(_libc.unshare(flags), "unshare")
    else:
        _check(_libc.unshare(CLONE_NEWUSER | flags), "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    _mount("none", "/", "", MS_REC | MS_PRIVATE)


def _mount_points() -> List[str]:
    """Every mount point but those under ``/proc`` and ``/dev``, which the job gets its own of, shortest first."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if not any(point == v or point.startswith(v + "/") for v in ("/proc", "/dev")):
                points.append(point)
    return sorted(set(points), key=len)


def _read_only(point: str) -> None:
    try:
        _mount("none", point, "", MS_REMOUNT | MS_BIND | MS_RDONLY)
    except OSError:
        # A mount locked by the parent user namespace keeps its nosuid, nodev and noexec flags.
        locked = os.statvfs(point).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount("none", point, "", MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked)


def _bind(source: str, target: str, writable: bool) -> None:
    _mount(source, target, "", MS_BIND | MS_REC)
    if writable:
        _mount("none", target, "", MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)


def private_dev() -> None:
    """Cover ``/dev`` with a read-only file system holding the ``DEVICES`` bound from the host, the usual links and
    an empty ``shm`` to overlay: a root job may open any device node it sees, a disk included."""
    host = os.open("/dev", os.O_PATH | os.O_DIRECTORY)
    names = sorted(n for n in os.listdir("/dev") if any(fnmatch.fnmatch(n, p) for p in DEVICES))
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755")
    for name in names:
        source, target = f"{_held(host)}/{name}", f"/dev/{name}"
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        _mount(source, target, "", MS_BIND | MS_REC)
    for name, to in DEV_LINKS.items():
        os.symlink(to, f"/dev/{name}")
    os.mkdir("/dev/shm")
    os.chmod("/dev/shm", 0o1777)
    os.close(host)
    _mount("none", "/dev", "", MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _held(fd: int) -> str:
    """A path naming what ``fd`` was opened on, even once other mounts hide its name."""
    return f"/proc/self/fd/{fd}"


def confine(spec: Dict) -> None:
    """Build the namespace ``spec`` describes (see ``chaosckpt.conductor.runs.confinement``); with bubblewrap,
    only the overlays and the writable folders above them: bubblewrap makes the rest read-only.

    Writable folders are bound first, so they stay writable when everything else is
    made read-only, and held open, so overlays mounted above them (a map of ``/tmp``
    when the sandbox lies under it) can neither hide them nor take them as layers.
    """
    seal = not spec.get("bwrap")
    enter_namespace(CLONE_NEWNS | (ISOLATED | (CLONE_NEWPID if spec.get("pids") else 0) if seal else 0))
    points = [p for p in _mount_points() if p not in spec["writable"]]
    held = {}
    for path in spec["writable"]:
        _bind(path, path, writable=True)
        held[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)
    if seal:
        for point in points:
            _read_only(point)
        private_dev()
    layers = []
    for layer in spec["maps"]:
        fds = [os.open(layer[k], os.O_PATH | os.O_DIRECTORY) for k in ("upper", "work")]
        layers.append((layer["target"], fds))
    for target, (upper, work) in layers:
        _mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV,
               f"lowerdir={target},upperdir={_held(upper)},workdir={_held(work)}")
    for path, fd in held.items():
        # a folder on a file system mounted below an overlaid one (a disk mounted under /tmp) is missing from
        # the overlay's view: its empty name is made there, in the overlay's upper layer, to bind it onto
        os.makedirs(path, exist_ok=True)
        _bind(_held(fd), path, writable=True)
    if not seal:
        return
    for item in spec.get("inputs", []):
        _mount(item["source"], item["target"], "", MS_BIND)
        _read_only(item["target"])
    for path in () if spec.get("pids") else KERNEL_SETTINGS:
        if os.path.exists(path):
            _mount(path, path, "", MS_BIND | MS_REC)
            _read_only(path)


def bwrap_argv(spec: Dict, path: str, argv: List[str], info: int, helper: int) -> List[str]:
    """The bubblewrap command that runs this file as the first process (``--init``) of the job's namespaces: a
    read-only view of the root, its own ``/dev`` and ``/proc``, the writable folders, overlays and inputs of
    ``spec`` bound in (bubblewrap binds with nosuid, and nodev but for devices), every capability dropped but the
    one ``init`` needs to empty the bounding set (``setpcap``). ``info`` gets bubblewrap's JSON (the first
    process's pid), ``helper`` is the first process's end of the socket to this helper; ``path`` is the spec's file."""
    out = [spec["bwrap"], "--die-with-parent", "--new-session", "--as-pid-1", "--info-fd", str(info),
           "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--cap-drop", "ALL", "--cap-add", "CAP_SETPCAP",
           "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for name in sorted(n for n in os.listdir("/dev") if any(fnmatch.fnmatch(n, p) for p in BWRAP_DEVICES)):
        out += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for layer in spec["maps"]:
        out += ["--bind", layer["target"], layer["target"]]
    for folder in spec["writable"]:
        out += ["--bind", folder, folder]
    for item in spec.get("inputs", []):
        out += ["--ro-bind", item["source"], item["target"]]
    return [*out, "--chdir", spec["cwd"], "--", sys.executable, "-I", "-S", os.path.abspath(__file__), "--init",
            path, str(helper), "--", *argv]


def drop_capabilities() -> None:
    """Drop every capability from the bounding, ambient, effective, permitted and inheritable sets, then forbid
    gaining privileges across ``exec``: a job needs none, and each one kept was a way out (``dac_read_search``
    opened any file of a mounted file system by its handle)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: the low words, then the high words
    _check(_libc.capset(header, data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")


def _unconfined(exc: OSError) -> NoReturn:
    sys.stderr.write(f"{FAILED}{exc.strerror or exc}; map another folder or leave it out (--map, links out of the working "
                     "directory)\n")
    sys.exit(UNCONFINED)


def run_job(argv: List[str]) -> NoReturn:
    """Replace this process with the job, its signals as a fresh process has them."""
    for sig in (*FORWARDED, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"chaosckpt: cannot start {argv[0]}: {exc.strerror}\n")
        os._exit(127)


def _forward(to: int) -> None:
    def send(signum: int, _frame: object) -> None:
        try:
            os.kill(to, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, send)


def init(spec: Dict, argv: List[str], helper: socket.socket) -> NoReturn:
    """The PID namespace's first process: it dies with the helper (``PR_SET_PDEATHSIG``, or at once when the
    helper is already gone: its end of ``helper`` reads end of file), mounts the namespace's own ``/proc``
    (read-only; only the job's processes are in it) unless bubblewrap did, drops the capabilities, then starts the
    job as a child (telling the helper ``STARTED`` first), forwards it the ``FORWARDED`` signals, reaps orphans, and
    ends with the job's wait status sent to the helper. The kernel then kills every process left in the namespace."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent death signal")
    helper.setblocking(False)
    try:
        if helper.recv(1) == b"":
            os._exit(UNCONFINED)
    except BlockingIOError:
        pass
    try:
        if not spec.get("bwrap"):
            _mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        drop_capabilities()
    except OSError as exc:
        _unconfined(exc)
    os.chdir(spec["cwd"])
    if spec.get("conductor_env", "") in os.environ:
        os.environ[spec["conductor_env"]] = "1"  # for the job's watchdog: this process dies with the helper
    helper.sendall(STARTED)
    job = os.fork()
    if job == 0:
        helper.close()
        os.setsid()
        run_job(argv)
    _forward(job)
    status = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == job:
            break
    helper.setblocking(True)
    helper.sendall(str(status).encode())
    os._exit(0)


def exit_as(status: int) -> NoReturn:
    """End this process as one whose wait status is ``status`` ended: by the same signal, or the same code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128)


def _bubblewrap(spec: Dict, path: str, argv: List[str], helper: socket.socket, info: int) -> NoReturn:
    """Become bubblewrap, dying with this helper, its first process told of ``helper`` and its pid sent to ``info``."""
    parent = os.getppid()
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "parent death signal")
    if os.getppid() != parent:
        os._exit(UNCONFINED)
    os.set_inheritable(helper.fileno(), True)
    os.set_inheritable(info, True)
    try:
        os.execv(spec["bwrap"], bwrap_argv(spec, path, argv, info, helper.fileno()))
    except OSError as exc:
        _unconfined(exc)


def _first_pid(info: int) -> Optional[int]:
    """The first process's pid (outside its namespace), from bubblewrap's ``--info-fd``; None when bubblewrap ended
    without starting it (it builds the mounts after, in that process)."""
    data = b""
    try:
        while True:
            chunk = os.read(info, 4096)
            if not chunk:
                return None
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError, TypeError):
                continue
    finally:
        os.close(info)


def relay(spec: Dict, path: str, argv: List[str]) -> NoReturn:
    """Start the PID namespace's first process (``init``; through bubblewrap when the spec names it), forward it
    signals, and end as the job ended; its end of a socket pair carries the job's wait status, and tells the first
    process when this one died."""
    ours, theirs = socket.socketpair()
    info, to_us = os.pipe() if spec.get("bwrap") else (-1, -1)
    first = os.fork()
    if first == 0:
        ours.close()
        if not spec.get("bwrap"):
            init(spec, argv, theirs)
        os.close(info)
        _bubblewrap(spec, path, argv, theirs, to_us)
    theirs.close()
    target: Optional[int] = first
    if spec.get("bwrap"):
        os.close(to_us)
        target = _first_pid(info)
    _forward(target or first)
    try:
        drop_capabilities()  # this process needs none: it only waits
    except OSError:
        pass
    _, status = os.waitpid(first, 0)
    told = b""
    while True:
        chunk = ours.recv(64)
        if not chunk:
            break
        told += chunk
    if told.startswith(STARTED):
        told = told[len(STARTED):]
    elif spec.get("bwrap") and os.waitstatus_to_exitcode(status) != UNCONFINED:  # the first process said why
        sys.stderr.write(f"{FAILED}bubblewrap could not build the namespaces; leave out or restore the folder or "
                         "input it names\n")
        os._exit(UNCONFINED)
    exit_as(int(told) if told.isdigit() else status)


USAGE = "usage: namespace_helper.py SPEC.json -- COMMAND... | namespace_helper.py --init SPEC.json FD -- COMMAND...\n"


def main(argv: List[str]) -> None:
    inner = argv[1:2] == ["--init"]
    args = argv[2:] if inner else argv[1:]
    split = 2 if inner else 1
    if len(args) < split + 2 or args[split] != "--":
        sys.stderr.write(USAGE)
        sys.exit(UNCONFINED)
    with open(args[0]) as f:
        spec = json.load(f)
    command = args[split + 1:]
    if inner:  # inside bubblewrap's namespaces
        init(spec, command, socket.socket(fileno=int(args[1])))
    try:
        confine(spec)
        if not spec.get("pids"):
            drop_capabilities()
    except OSError as exc:
        _unconfined(exc)
    if spec.get("pids"):
        relay(spec, args[0], command)
    os.chdir(spec["cwd"])
    run_job(command)


if __name__ == "__main__":
    main(sys.argv)
