"""The Python API and the pytest plugin: a resilience test in the user's own test suite."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from chaosckpt.conductor.errors import UsageError
from conftest import REPO


def test_importing_chaosckpt_imports_nothing_else():
    code = "import sys, chaosckpt; print(sorted(m for m in sys.modules if m.startswith('chaosckpt')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == ["chaosckpt"]


def test_bad_input_raises_the_usage_error_the_cli_would_print(tmp_path):
    import chaosckpt

    with pytest.raises(UsageError, match="script nope.py does not exist"):
        chaosckpt.run("nope.py", workdir=tmp_path)
    with pytest.raises(UsageError, match="unknown scenario 'nope'"):
        chaosckpt.run("train.py", scenario="nope", workdir=tmp_path)


@pytest.mark.e2e
def test_a_resilience_test_in_the_users_own_suite_uses_the_fixture(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "robust_train.py", project / "train.py")
    (project / "tests" / "test_resilience.py").write_text(
        "def test_survives_kill_mid_save(chaosckpt):\n"
        "    result = chaosckpt.run('train.py', scenario='kill9-mid-save', args=['--epochs', '2'])\n"
        "    assert result.passed, result.headline\n"
        "    assert result.outcome == 'last-good' and result.reproduced\n"
    )
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert list((project / ".chaosckpt" / "references").glob("*/run.json")), "the reference run was cached for the next run"
