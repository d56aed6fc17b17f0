"""A daemonizer: a job that leaves its process group and clears its environment (``env -i setsid -f``) must not
outlive its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

from chaosckpt import protocol
from chaosckpt.conductor.runs import confinement, launcher, leftovers
from chaosckpt.conductor.runs.launcher import RunSpec


def daemons(tag: str):
    return [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]


def daemon(tag: str):
    """The processes running the command ``tag`` itself, not the ones that name it in their command line."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == tag.split()]


@pytest.mark.skipif(not confinement.available(), reason="no mount namespace here: the job runs unconfined")
def test_a_daemon_that_leaves_its_session_and_environment_is_killed_with_the_run(tmp_path):
    tag = f"sleep {300 + uuid.uuid4().int % 1000}.5"  # a command line no other process has
    box = tmp_path / "box"
    box.mkdir()
    spec = RunSpec("reference", ["bash", "-c", f"env -i setsid -f {tag}; sleep 0.5"], box, tmp_path / "log",
                   timeout_s=60)
    try:
        launcher.launch(spec)
        time.sleep(2)
        assert daemons(tag) == [], "the daemon outlived its run"
    finally:
        for proc in daemons(tag):
            proc.kill()


@pytest.mark.skipif(not confinement.available(), reason="no mount namespace here: the job runs unconfined")
def test_the_end_of_a_run_kills_nothing_of_a_job_started_after_its_namespace_was_gone(tmp_path):
    """The kernel numbers a new namespace with the lowest free number: the one a job that just ended had. A run
    that read its job's namespace without holding it killed, at its end, whatever process got that number next
    (another run's job, the confinement probe)."""
    box = tmp_path / "box"
    box.mkdir()
    argv, env = confinement.command(["sleep", "2"], box, tmp_path / "log", [])  # long enough to be seen confined under load
    job = subprocess.Popen(argv, cwd=box, env={**os.environ, **env})
    held = None
    while held is None and job.poll() is None:
        held = launcher.job_namespace(job.pid)
    job.wait()
    assert held is not None
    later = [subprocess.Popen(["unshare", "--mount", "sleep", "30"]) for _ in range(3)]
    try:
        time.sleep(0.5)
        named = [p.pid for p in later if os.readlink(f"/proc/{p.pid}/ns/mnt") == held[0]]
        assert named == [], "a new namespace took the number of the one the run still holds"
    finally:
        os.close(held[1])
        for proc in later:
            proc.kill()
            proc.wait()


needs_pid_namespace = pytest.mark.skipif(not confinement.pid_namespace(), reason="no PID namespace here")


@needs_pid_namespace
def test_the_pid_namespace_alone_kills_a_daemon_with_the_run(tmp_path, monkeypatch):
    """No scan of mount namespaces, no marker: the daemon dies because the namespace's first process does."""
    monkeypatch.setattr(launcher, "_in_namespace", lambda namespace: [])
    monkeypatch.setattr(launcher, "_marked", lambda mark: [])
    tag = f"sleep {300 + uuid.uuid4().int % 1000}.25"
    box = tmp_path / "box"
    box.mkdir()
    spec = RunSpec("reference", ["bash", "-c", f"env -i setsid -f {tag}; sleep 0.5"], box, tmp_path / "log",
                   timeout_s=60)
    try:
        result = launcher.launch(spec)
        assert result.returncode == 0 and result.survivors == []
        time.sleep(0.5)
        assert daemon(tag) == [], "the daemon outlived its run"
    finally:
        for proc in daemon(tag):
            proc.kill()


@needs_pid_namespace
def test_a_daemon_dies_with_the_chaosckpt_that_started_it_killed_outright(tmp_path):
    """chaosckpt SIGKILLed mid-run: no kill_tree ran, no `clean` yet; the namespace dies with the helper."""
    tag = f"sleep {300 + uuid.uuid4().int % 1000}.75"
    box = tmp_path / "box"
    box.mkdir()
    (tmp_path / "log").mkdir()
    conductor = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        from pathlib import Path
        from chaosckpt.conductor.runs import confinement, launcher
        argv, env = confinement.command(["bash", "-c", "env -i setsid -f {tag}; sleep 300"], Path({str(box)!r}),
                                        Path({str(tmp_path / "log")!r}), [])
        subprocess.Popen(argv, cwd={str(box)!r}, env={{**os.environ, **env}}, start_new_session=True,
                         preexec_fn=launcher.die_with_parent(signal.SIGKILL))
        print("started", flush=True)
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", conductor], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "started\n"
        deadline = time.monotonic() + 30
        while not daemon(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon(tag), "the daemon never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while daemon(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon(tag) == [], "the daemon outlived the chaosckpt that started it"
    finally:
        proc.kill()
        for leftover in daemon(tag):
            leftover.kill()


@needs_pid_namespace
def test_clean_kills_the_daemon_of_a_run_whose_chaosckpt_died_through_its_namespace(tmp_path):
    """``clean`` finds a dead run's processes by their environment: the daemon cleared its own, but the
    namespace's first process kept it, and killing that kills the daemon too."""
    tag = f"sleep {300 + uuid.uuid4().int % 1000}.125"
    folder = tmp_path / "results" / "20261205-000000-kill9-mid-save"
    box, log = folder / "sandboxes" / "reference", folder / "reference"
    box.mkdir(parents=True)
    (log / "events").mkdir(parents=True)
    (folder / leftovers.LOCK).touch()  # its chaosckpt died holding it
    argv, env = confinement.command(["bash", "-c", f"env -i setsid -f {tag}; sleep 300"], box, log, [])
    job = subprocess.Popen(argv, cwd=box, env={**os.environ, **env, protocol.ENV_RUN_DIR: str(log / "events")},
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not daemon(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon(tag), "the daemon never started"
        cleaned = leftovers.sweep(tmp_path / "results")
        assert [c.folder for c in cleaned] == [folder.resolve()] and cleaned[0].processes
        job.wait(timeout=10)
        deadline = time.monotonic() + 10
        while daemon(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon(tag) == [], "clean left the daemon running"
    finally:
        job.kill()
        for leftover in daemon(tag):
            leftover.kill()
