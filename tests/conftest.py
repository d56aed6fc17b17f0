"""Fixtures that write a small training project and run the real ``chaosckpt`` command on it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
JOB = Path(__file__).resolve().parent / "jobs" / "train_job.py"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> dict:
        return json.loads(self.stdout)

    @property
    def trial(self) -> dict:
        """The first trial of ``run --json``'s document, which must be valid against the shipped schema."""
        assert_envelope("run", self.doc)
        return self.doc["trials"][0]


def run_chaosckpt(args: List[str], cwd: Path, env: Optional[Dict[str, str]] = None, timeout: float = 300) -> Result:
    """Run the installed command line as a user would, in ``cwd``."""
    proc = subprocess.run(
        [sys.executable, "-m", "chaosckpt", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def tree_digest(root: Path) -> Dict[str, str]:
    """Path -> sha256 of every file under ``root`` (symlinks by target), to prove nothing was written."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def processes_of(results: Path) -> List[int]:
    """Live processes whose chaosckpt run directory lies under ``results``."""
    found = []
    for proc in psutil.process_iter():
        try:
            run_dir = proc.environ().get("CHAOSCKPT_RUN_DIR", "")
            if run_dir.startswith(str(results)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def project_with(tmp_path: Path, job: Path) -> Path:
    """A user's project folder holding ``job`` as ``train.py``."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(job, root / "train.py")
    return root


def judged(tmp_path: Path, job: Path, *args: str):
    """Run ``job`` as ``train.py`` under ``chaosckpt run ARGS --json``; its exit status (0 or 1) and its trial."""
    project = project_with(tmp_path, job)
    res = run_chaosckpt(["run", "train.py", "--json", "--out", str(tmp_path / "r"), *args], cwd=project)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, res.trial


@pytest.fixture(params=["bubblewrap", "namespaces"])
def held_by(request, monkeypatch) -> str:
    """The test runs twice: its runs held by bubblewrap (skipped where it is missing), then by chaosckpt's own
    namespaces (``confinement.mode()``)."""
    from chaosckpt.conductor.runs import confinement

    if request.param == "bubblewrap" and confinement.bubblewrap() is None:
        pytest.skip("bubblewrap is not installed here")
    if request.param == "namespaces":
        monkeypatch.setattr(confinement, "bubblewrap", lambda: None)
    if not confinement.pid_namespace():
        pytest.skip("no PID namespace on this machine")
    assert confinement.mode() == request.param
    return request.param


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder holding the configurable test job as ``train.py``."""
    return project_with(tmp_path, JOB)


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    """A stored suite of three trials: one passed, one failed (diverged, with a finding), one never run."""
    from stored_results import stored_suite

    return stored_suite(tmp_path)


JUNIT_SCHEMA = Path(__file__).resolve().parent / "junit-10.xsd"


def read_junit(path: Path):
    """A JUnit file chaosckpt wrote, validated against Jenkins xunit's junit-10 rules, then read back as CI tools read it."""
    import junitparser
    import xmlschema

    xmlschema.XMLSchema(str(JUNIT_SCHEMA)).validate(str(path))
    return junitparser.JUnitXml.fromfile(str(path))


def assert_envelope(command: str, doc: dict) -> dict:
    """``doc`` is valid against the JSON Schema chaosckpt ships for ``COMMAND --json``, envelope included."""
    import jsonschema

    from chaosckpt import __version__
    from chaosckpt.conductor.results.envelope import schema

    jsonschema.validate(doc, schema(command), format_checker=jsonschema.FormatChecker())
    assert (doc["format"], doc["chaosckpt"]) == (1, __version__)
    return doc
