"""The namespace a run starts in: only its sandbox, events folder and layers can be written; mapped folders and
/tmp are overlays whose writes land in the layers; where no namespace can be made, the agent refuses instead."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Tuple

import pytest

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.runs import confinement, launcher, sandbox
from chaosckpt.conductor.runs.launcher import RunSpec

needs_namespace = pytest.mark.skipif(not confinement.available(), reason="no mount namespace on this machine")


@pytest.fixture
def outside():
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    folder = Path(tempfile.mkdtemp(prefix="chaosckpt-outside-", dir=base))
    (folder / "real.txt").write_text("real\n")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_confined(tmp_path: Path, script: str, maps=()):
    box, log = tmp_path / "box", tmp_path / "log"
    box.mkdir(exist_ok=True)
    log.mkdir(exist_ok=True)
    argv, env = confinement.command(["bash", "-c", script], box, log, [str(m) for m in maps])
    done = subprocess.run(argv, cwd=box, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    return box, done


@needs_namespace
def test_writes_outside_fail_and_leave_the_real_file(tmp_path, outside):
    box, done = run_confined(tmp_path, f"echo in > here.txt; echo x > {outside}/real.txt; echo x > {outside}/new.txt")
    assert done.returncode != 0 and done.stderr.count("Read-only file system") == 2
    assert (box / "here.txt").read_text() == "in\n"
    assert (outside / "real.txt").read_text() == "real\n" and not (outside / "new.txt").exists()


@needs_namespace
def test_mapped_folder_and_tmp_writes_land_in_the_layers(tmp_path, outside):
    name = f"chaosckpt-test-{os.getpid()}"
    box, done = run_confined(tmp_path, f"echo x > {outside}/real.txt && echo t > /tmp/{name} && cat {outside}/real.txt",
                             maps=[outside])
    assert done.returncode == 0 and done.stdout == "x\n", done.stderr
    assert (outside / "real.txt").read_text() == "real\n"
    assert not Path("/tmp", name).exists()
    upper = confinement.host_path(str(outside / "real.txt"), box, [str(outside)])
    assert upper.startswith(str(confinement.layers(box))) and Path(upper).read_text() == "x\n"
    sandbox.remove(box)
    assert not confinement.layers(box).exists()


def test_without_a_namespace_the_agent_refuses_and_names_the_path(tmp_path, outside, monkeypatch):
    monkeypatch.setattr(confinement, "available", lambda: False)
    box = tmp_path / "box"
    box.mkdir()
    code = (f"open('inside.txt', 'w').write('ok')\n"
            f"open({str(outside / 'real.txt')!r}, 'w').write('x')\n")
    spec = RunSpec("reference", [sys.executable, "-c", code], box, tmp_path / "log", timeout_s=60)
    result = launcher.launch(spec)
    assert result.returncode == 1
    assert (box / "inside.txt").read_text() == "ok" and (outside / "real.txt").read_text() == "real\n"
    paths = confinement.outside_writes(result.stderr, [box, tmp_path / "log"])
    assert paths == [str(outside / "real.txt")]
    line = confinement.refusal(paths)
    assert "cannot make a mount namespace" in line and "\n" not in line


def as_user(user: str, monkeypatch=None):
    """The command prefix that runs the confinement helper as ``user``: root as we are, or nobody, which needs an
    unprivileged user namespace (skipped where this machine has none) and a Python it can run there (the helper
    runs again inside bubblewrap's namespaces; our interpreter may lie in a folder only root can enter)."""
    if user == "root":
        return []
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or not setpriv:
        pytest.skip("running the helper as nobody needs root and setpriv")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*prefix, "unshare", "-Urm", "true"], capture_output=True).returncode != 0:
        pytest.skip("no unprivileged user namespace on this machine")
    python = next((p for p in (sys.executable, "/usr/bin/python3") if subprocess.run(
        [*prefix, "unshare", "-Urm", p, "-c", "pass"], capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip(f"nobody cannot run {sys.executable} in a user namespace")
    if monkeypatch is not None:
        monkeypatch.setattr(confinement, "PYTHON", python)
    return prefix


def confined_as(prefix, base: Path, outside: Path, script: str) -> Tuple[Path, subprocess.CompletedProcess]:
    """Run ``script`` with bash through the confinement helper in ``base/box`` as ``as_user`` gave it; the box and
    what it ran."""
    box, log = base / "box", base / "log"
    box.mkdir()
    log.mkdir()
    argv, env = confinement.command(["bash", "-c", script], box, log, [])
    if prefix:
        subprocess.run(["chown", "-R", "65534:65534", str(base), str(outside)], check=True)
        base.chmod(0o755)
    return box, subprocess.run([*prefix, *argv], cwd=box, env={**os.environ, **env}, capture_output=True, text=True,
                               timeout=60)


@needs_namespace
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_job_that_remounts_or_writes_a_disk_raw_leaves_the_file_outside_as_it_was(user, outside, monkeypatch):
    prefix = as_user(user, monkeypatch)
    base = Path(tempfile.mkdtemp(prefix="chaosckpt-escape-", dir="/var/tmp"))
    if prefix:  # the checkout may lie in a folder only we can read: nobody runs a copy of the helper
        monkeypatch.setattr(confinement, "HELPER", Path(shutil.copy(confinement.HELPER, base / "namespace_helper.py")))
    box = base / "box"
    try:
        victim = outside / "real.txt"
        disks = "find /dev -type b | wc -l"
        script = (f"id -u; {disks}; "
                  f"mount -o remount,rw /; mount -o remount,rw {outside}; mount -t tmpfs none {outside}; "
                  f"mknod disk b 8 0; "
                  f"unshare -Urm sh -c 'mount -o remount,rw {outside}; echo u > {victim}'; "
                  f"echo x > {victim}; echo done")
        box, done = confined_as(prefix, base, outside, script)
        assert done.stdout.split() == ["0", "0", "done"], done.stdout + done.stderr  # root inside, no disk in /dev
        assert done.stderr.count("permission denied") == 3 and "mknod: disk: Operation not permitted" in done.stderr
        assert victim.read_text() == "real\n" and sorted(p.name for p in outside.iterdir()) == ["real.txt"]
        assert not (box / "disk").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(confinement.layers(box), ignore_errors=True)


@needs_namespace
def test_the_job_keeps_the_devices_training_uses_and_no_capability_at_all(tmp_path):
    script = ("echo x > /dev/null && head -c 8 /dev/urandom | wc -c && echo s > /dev/shm/s && cat /dev/shm/s && "
              "ls /dev/fd/ >/dev/null && grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
    box, done = run_confined(tmp_path, script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[:2] == ["8", "s"]
    sets = dict(line.split(":") for line in lines[2:] if line)
    assert {k: int(v, 16) for k, v in sets.items()} == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0,
                                                         "CapAmb": 0, "NoNewPrivs": 1}


needs_pid_namespace = pytest.mark.skipif(not confinement.pid_namespace(), reason="no PID namespace on this machine")


@needs_pid_namespace
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_job_cannot_write_through_another_process_view_of_the_file_system_and_sees_only_its_own(user, outside,
                                                                                                 monkeypatch):
    """A process outside the sandbox, of the job's user and with no capability the job lacks (a root process
    that dropped them all), whose root and working directory are the host's: without a PID namespace of its own
    the job wrote the file outside through ``/proc/<pid>/root`` and ``/proc/<pid>/cwd``."""
    prefix = as_user(user, monkeypatch)
    base = Path(tempfile.mkdtemp(prefix="chaosckpt-proc-", dir="/var/tmp"))
    if prefix:
        monkeypatch.setattr(confinement, "HELPER", Path(shutil.copy(confinement.HELPER, base / "namespace_helper.py")))
    victim = outside / "real.txt"
    drop = [shutil.which("setpriv") or "setpriv", "--inh-caps=-all", "--bounding-set=-all"]
    holder = subprocess.Popen([*(prefix or drop), "sleep", "60"], cwd=outside)
    try:
        pid = holder.pid
        script = (f"echo $$; cat /proc/[0-9]*/comm | sort -u | tr '\\n' ' '; echo; "
                  f"echo r > /proc/{pid}/root{victim}; echo c > /proc/{pid}/cwd/real.txt; "
                  f"echo u > /proc/{pid}/cwd/../{outside.name}/real.txt; echo o > /proc/1/root{victim}; "
                  f"echo n > /proc/{pid}/root{outside}/new.txt; echo done")
        _, done = confined_as(prefix, base, outside, script)
        lines = done.stdout.split("\n")
        assert lines[0] == "2" and lines[2] == "done", done.stdout + done.stderr  # the job is the namespace's second
        assert set(lines[1].split()) <= {"bash", "cat", "sort", "tr", "python3", "python3.11", "python"}, lines[1]
        assert done.stderr.count("No such file or directory") == 4 and "Read-only file system" in done.stderr
        assert victim.read_text() == "real\n" and sorted(p.name for p in outside.iterdir()) == ["real.txt"]
    finally:
        holder.kill()
        holder.wait()
        shutil.rmtree(base, ignore_errors=True)


@needs_namespace
def test_a_refused_write_the_job_catches_still_stops_the_trial_with_its_path(tmp_path, outside):
    box = tmp_path / "box"
    box.mkdir()
    code = (f"import os\n"
            f"for attempt in (lambda: open({str(outside / 'real.txt')!r}, 'w'), "
            f"lambda: os.replace({str(outside / 'real.txt')!r}, {str(outside / 'new.txt')!r})):\n"
            f"    try:\n        attempt()\n    except OSError:\n        pass\n")
    spec = RunSpec("reference", [sys.executable, "-c", code], box, tmp_path / "log", timeout_s=60)
    result = launcher.launch(spec)
    assert result.returncode == 0 and result.stderr.read_text() == ""
    allowed = [box, spec.log_dir, confinement.layers(box)]
    paths = confinement.refused_writes(result.events_dir, allowed)
    assert paths == [str(outside / "real.txt"), str(outside / "new.txt")]
    with pytest.raises(UsageError, match=f"writes outside its working directory \\({outside}/real.txt, {outside}/new.txt\\)"):
        confinement.refuse_outside(result.returncode, result.stderr, allowed, result.events_dir)
    assert (outside / "real.txt").read_text() == "real\n" and not (outside / "new.txt").exists()


def test_a_signal_to_the_helper_reaches_the_job_and_the_helper_ends_as_the_job_did(held_by, tmp_path):
    """Ctrl-C or a SIGTERM given to chaosckpt's run goes to the job through the helper and the namespace's first
    process (under bubblewrap too, which passes no signal on); the helper exits with the job's status."""
    box, log = tmp_path / "box", tmp_path / "log"
    box.mkdir()
    log.mkdir()
    script = "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
    argv, env = confinement.command(["bash", "-c", script], box, log, [])
    helper = subprocess.Popen(argv, cwd=box, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout.readline() == "ready\n"
        helper.send_signal(signal.SIGTERM)
        assert helper.wait(timeout=30) == 7 and helper.stdout.read() == "got TERM\n"
    finally:
        helper.kill()
        helper.wait()


def test_a_run_bubblewrap_cannot_build_is_one_line_naming_what_it_said(tmp_path):
    """A large input bound read-only whose real file went away after the sandbox was made: bubblewrap refuses to
    start, and the trial stops with one line carrying bubblewrap's own reason."""
    if confinement.bubblewrap() is None:
        pytest.skip("bubblewrap is not installed here")
    box, log = tmp_path / "box", tmp_path / "log"
    box.mkdir()
    log.mkdir()
    (box / "data.bin").touch()
    confinement.layers(box).mkdir()
    (confinement.layers(box) / confinement.INPUTS).write_text(f'{{"data.bin": "{tmp_path / "gone.bin"}"}}')
    argv, env = confinement.command(["true"], box, log, [])
    with open(log / "stderr.log", "w") as err:
        done = subprocess.run(argv, cwd=box, env={**os.environ, **env}, stderr=err, timeout=60)
    assert done.returncode == confinement.namespace_helper.UNCONFINED
    with pytest.raises(UsageError) as refused:
        confinement.refuse_outside(done.returncode, log / "stderr.log", [box, log])
    [line] = str(refused.value).splitlines()
    assert line.startswith("cannot confine the job to its sandbox: bubblewrap could not build the namespaces")
    assert f"(bwrap: Can't find source path {tmp_path / 'gone.bin'}" in line, line
