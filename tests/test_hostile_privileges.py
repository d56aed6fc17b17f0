"""A hostile job changes nothing outside its run, with bubblewrap and with chaosckpt's own namespaces: no file by its
handle (``open_by_handle_at``), no cgroup or kernel setting under ``/sys``, no frozen daemon that outlives the run, no
System V IPC object left on the host; as root and, where the machine allows, as nobody."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List

import psutil
import pytest
from test_confinement import as_user, confined_as

from chaosckpt.conductor.runs import confinement, launcher
from chaosckpt.conductor.runs.launcher import RunSpec

pytestmark = pytest.mark.skipif(not confinement.pid_namespace(), reason="no PID namespace on this machine")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.fixture
def base() -> Path:
    """A folder outside /tmp (which every run gets a private overlay of) holding the run and the victim."""
    folder = Path(tempfile.mkdtemp(prefix="chaosckpt-hostile-", dir="/var/tmp"))
    (folder / "outside").mkdir()
    (folder / "outside" / "real.txt").write_text("real\n")
    yield folder
    shutil.rmtree(confinement.layers(folder / "box"), ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def run_as(user: str, base: Path, script: str, monkeypatch):
    """Run ``script`` with bash, confined in ``base/box``, as ``user``; ``{python}`` in it names a Python ``user``
    can run there."""
    prefix = as_user(user, monkeypatch)
    script = script.replace("{python}", confinement.PYTHON)
    if prefix:
        monkeypatch.setattr(confinement, "HELPER", Path(shutil.copy(confinement.HELPER, base / "namespace_helper.py")))
    return confined_as(prefix, base, base / "outside", script)


def file_handle(path: Path) -> bytes:
    """``struct file_handle`` of ``path`` as ``name_to_handle_at`` gives it: what a job needs to open the file by."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint32.from_buffer(buf).value = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, str(path).encode(), buf, ctypes.byref(mount_id), 0) != 0:
        pytest.skip(f"no file handles on this file system: {os.strerror(ctypes.get_errno())}")
    return buf.raw[:8 + ctypes.c_uint32.from_buffer(buf).value]


OPEN_BY_HANDLE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
handle = ctypes.create_string_buffer(bytes.fromhex(sys.argv[1]))
fd = libc.open_by_handle_at(os.open(".", os.O_RDONLY | os.O_DIRECTORY), handle, os.O_WRONLY | os.O_APPEND)
if fd < 0:
    print("refused:", os.strerror(ctypes.get_errno()))
else:
    os.write(fd, b"written by the job\\n")
    print("wrote")
"""


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_file_handle_taken_outside_opens_nothing(user, held_by, base, monkeypatch):
    """The handle of a file outside, opened through the sandbox's writable mount (the same file system): with
    ``dac_read_search`` kept, the job appended to the real file."""
    victim = base / "outside" / "real.txt"
    handle = file_handle(victim).hex()
    (base / "job.py").write_text(OPEN_BY_HANDLE)
    box, done = run_as(user, base, f"{{python}} -I {base / 'job.py'} {handle}", monkeypatch)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:"), done.stdout
    assert victim.read_text() == "real\n"


def cgroup_roots() -> List[Path]:
    with open("/proc/self/mounts") as f:
        return [Path(line.split()[1]) for line in f if line.split()[2] in ("cgroup", "cgroup2")]


def listing(roots: List[Path]) -> Dict[str, List[str]]:
    return {str(r): sorted(p.name for p in r.iterdir() if p.is_dir()) for r in roots}


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_sys_is_read_only_cgroups_and_kernel_settings_stay(user, held_by, base, monkeypatch):
    """The job makes a cgroup in every hierarchy and writes the transparent-hugepage setting (its own value back,
    so that a write let through changes nothing here): every write fails, nothing stays on the host."""
    roots = cgroup_roots()
    if not roots or not THP.exists():
        pytest.skip("no cgroup file system or transparent-hugepage setting here")
    name = f"chaosckpt-hostile-{uuid.uuid4().hex[:8]}"
    setting = THP.read_text().split("[")[1].split("]")[0]
    before = listing(roots), THP.read_text()
    script = "".join(f"mkdir {r / name}; " for r in roots) + f"echo {setting} > {THP}; echo done"
    try:
        _, done = run_as(user, base, script, monkeypatch)
        assert done.stdout == "done\n", done.stderr
        assert done.stderr.count("Read-only file system") == len(roots) + 1, done.stderr
        assert (listing(roots), THP.read_text()) == before
    finally:
        for root in roots:
            if (root / name).is_dir():
                (root / name).rmdir()


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_ipc_objects_the_job_makes_die_with_it(user, held_by, base, monkeypatch):
    """``ipcmk`` in the job: without an IPC namespace of its own each run left a shared memory segment, a message
    queue and a semaphore on the host."""
    if shutil.which("ipcmk") is None:
        pytest.skip("no ipcmk here")
    tables = [Path("/proc/sysvipc", t) for t in ("shm", "msg", "sem")]
    before = {t.name: t.read_text() for t in tables}
    _, done = run_as(user, base, "ipcmk -M 4096 && ipcmk -Q && ipcmk -S 1 && echo done", monkeypatch)
    after = {t.name: t.read_text() for t in tables}
    try:
        assert done.stdout.splitlines()[-1] == "done", done.stdout + done.stderr  # made, in its own namespace
        assert after == before
    finally:
        for kind, flag in (("shm", "-m"), ("msg", "-q"), ("sem", "-s")):
            for line in set(after[kind].splitlines()[1:]) - set(before[kind].splitlines()[1:]):
                os.system(f"ipcrm {flag} {line.split()[1]}")


def freezer() -> Dict[str, str]:
    """Where a job would freeze its daemon: a cgroup-v1 freezer hierarchy, else cgroup v2's ``cgroup.freeze``."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    for _, point, kind, options, *_ in mounts:
        if kind == "cgroup" and "freezer" in options.split(","):
            return {"root": point, "freeze": "freezer.state", "frozen": "FROZEN", "thaw": "THAWED"}
    for _, point, kind, *_ in mounts:
        if kind == "cgroup2":
            return {"root": point, "freeze": "cgroup.freeze", "frozen": "1", "thaw": "0"}
    pytest.skip("no cgroup freezer here")


def test_a_daemon_the_job_freezes_in_a_cgroup_does_not_outlive_the_run(held_by, tmp_path):
    """A frozen process ignores SIGKILL until thawed (cgroup v1): a job that froze its own daemon left it, and the
    namespace's first process, running after the run ("processes of the job survived SIGKILL")."""
    where = freezer()
    group = Path(where["root"], f"chaosckpt-hostile-{uuid.uuid4().hex[:8]}")
    tag = f"sleep {300 + uuid.uuid4().int % 1000}.5"
    box = tmp_path / "box"
    box.mkdir()
    script = (f"{tag} & d=$!; mkdir {group} && echo $d > {group / 'cgroup.procs'} && "
              f"echo {where['frozen']} > {group / where['freeze']}; sleep 0.2")
    try:
        result = launcher.launch(RunSpec("reference", ["bash", "-c", script], box, tmp_path / "log", timeout_s=60))
        assert result.confinement == held_by
        assert result.survivors == [], "processes of the job survived SIGKILL"
        assert "Read-only file system" in result.stderr.read_text()
        assert not group.exists()
        gone = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == tag.split()]
        assert gone == [], "the frozen daemon outlived its run"
    finally:
        if group.exists():
            (group / where["freeze"]).write_text(where["thaw"])
            for pid in (group / "cgroup.procs").read_text().split():
                psutil.Process(int(pid)).kill()
            deadline = time.monotonic() + 5
            while (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
                time.sleep(0.05)
            group.rmdir()
