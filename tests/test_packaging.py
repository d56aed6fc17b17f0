"""Packaging where users build: the declared setuptools floor builds the sdist and the wheel offline-style
(``--no-build-isolation``), the wheel is typed and carries its data, the sdist's own tests run, and the
public API type-checks."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.e2e  # builds a venv, an sdist and a wheel, and runs mypy: too slow for the unit tier

SKIPPED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".mypy_cache",
                                 "chaosckpt-results", ".chaosckpt", "*.pt")


def setuptools_floor() -> str:
    """The version in ``requires = ["setuptools>=X"]``: what an offline cluster may have and must build with."""
    [requirement] = [r for r in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
                     if r.startswith("setuptools")]
    return requirement.split(">=")[1].strip()


@pytest.fixture(scope="module")
def floor_python(tmp_path_factory) -> Path:
    """A throwaway venv holding exactly the declared setuptools floor, from the package index."""
    root = tmp_path_factory.mktemp("floor") / "venv"
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              f"setuptools=={setuptools_floor()}"], capture_output=True, text=True, timeout=300)
    if install.returncode != 0:
        last = (install.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot download setuptools=={setuptools_floor()} from the package index (offline?): {last}")
    return python


def test_the_declared_setuptools_floor_builds_the_sdist_and_from_it_the_wheel_without_build_isolation(floor_python, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=SKIPPED)
    dist = tmp_path / "dist"
    sdist = subprocess.run([str(floor_python), "-c", "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))",
                            str(dist)], cwd=source, capture_output=True, text=True, timeout=300)
    assert sdist.returncode == 0, sdist.stderr[-3000:]
    archive = dist / sdist.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert {"LICENSE", "tests/conftest.py", "tests/jobs/train_job.py", "tests/jobs/ddp_job.py", "tests/junit-10.xsd",
            "examples/robust_train.py", "chaosckpt/py.typed", "chaosckpt/conductor/results/schemas/run.schema.json"} <= names
    unpacked = next((tmp_path / "unpacked").iterdir())

    wheel = subprocess.run([str(floor_python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                            "--disable-pip-version-check", "-w", str(dist), str(unpacked)],
                           capture_output=True, text=True, timeout=300)
    assert wheel.returncode == 0, wheel.stdout[-3000:] + wheel.stderr[-3000:]
    [built] = dist.glob("chaosckpt-*.whl")
    with zipfile.ZipFile(built) as whl:
        files = set(whl.namelist())
        [meta_name] = [n for n in files if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(whl.read(meta_name))
    assert {"chaosckpt/py.typed", "chaosckpt/conductor/results/schemas/suite.schema.json", "chaosckpt/conductor/reports/templates/report.html.j2",
            "chaosckpt/scenarios/enospc.toml", "chaosckpt/agent/boot/sitecustomize.py"} <= files
    modules = {str(p.relative_to(REPO)) for p in (REPO / "chaosckpt").rglob("*.py")}
    assert modules - files == set(), "modules the wheel leaves out: add their package to pyproject.toml"
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in files)

    # the sdist's own tests run from it, against its own code
    tests = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider",
                            "tests/test_keywords.py", "tests/test_json_envelope.py::test_every_schema_is_a_valid_draft_2020_12_schema_requiring_the_envelope"],
                           cwd=unpacked, env={**os.environ, "PYTHONPATH": str(unpacked)}, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert tests.stdout.splitlines()[-1].startswith("16 passed")


def test_the_public_api_type_checks_as_its_users_will_use_it():
    """mypy --strict on ``chaosckpt/__init__.py``, the API, the result types, and a user's code (tests/typecheck)."""
    mypy = pytest.importorskip("mypy.api", reason="mypy is a test extra: pip install -e '.[test]'")
    files = ["chaosckpt/__init__.py", "chaosckpt/conductor/api.py", "chaosckpt/conductor/results/result.py",
             "chaosckpt/conductor/errors.py", "tests/typecheck/use_api.py"]
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        out, err, status = mypy.run(["--strict", "--warn-unused-ignores", "--follow-imports=silent", "--no-incremental",
                                     "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", *files])
    finally:
        os.chdir(cwd)
    assert status == 0, out + err
