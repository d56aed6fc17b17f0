"""The namespace a run starts in: only its sandbox, events folder and layers can be written; mapped folders and
/tmp are overlays whose writes land in the layers; where no namespace can be made, the agent refuses instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

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
