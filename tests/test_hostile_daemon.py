"""A daemonizer: a job that leaves its process group and clears its environment (``env -i setsid -f``) must not
outlive its run."""

from __future__ import annotations

import time
import uuid

import psutil
import pytest

from chaosckpt.conductor.runs import confinement, launcher
from chaosckpt.conductor.runs.launcher import RunSpec


def daemons(tag: str):
    return [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]


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
