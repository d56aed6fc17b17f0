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


HOST = r'''
import ctypes, json, os, signal, sys
import chaosckpt

libc = ctypes.CDLL(None, use_errno=True)


def state():
    flag = ctypes.c_int(-1)
    libc.prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    handlers = {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals()
                if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)}
    return {"subreaper": flag.value, "signals": handlers, "env": dict(os.environ), "cwd": os.getcwd()}


def interrupt(signum, frame):
    raise KeyboardInterrupt  # Ctrl-C in the middle of chaosckpt.run, as in a notebook


signal.signal(signal.SIGUSR1, lambda *a: None)
signal.signal(signal.SIGALRM, interrupt)
report = {}
before = state()
trial = chaosckpt.run("train.py", scenario="kill9-mid-save", args=["--epochs", "2"])
report["returned"] = {"status": trial.status, "before": before, "after": state()}

libc.prctl(36, 1, 0, 0, 0)  # a host that is a subreaper itself stays one
before = state()
signal.setitimer(signal.ITIMER_REAL, float(sys.argv[1]))
try:
    chaosckpt.run("train.py", scenario="kill9-mid-save", args=["--epochs", "2"], reuse_reference=False)
    raised = None
except KeyboardInterrupt:
    raised = "KeyboardInterrupt"
report["raised"] = {"status": raised, "before": before, "after": state()}
print(json.dumps(report))
'''


@pytest.mark.e2e
def test_run_leaves_its_host_process_as_it_found_it_whether_it_returns_or_raises(tmp_path):
    """Subreaper flag, signal handlers, environment and working directory, after chaosckpt.run returns or raises."""
    from conftest import processes_of

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "robust_train.py", project / "train.py")
    (project / "host.py").write_text(HOST)
    proc = subprocess.run([sys.executable, "host.py", "2.0"], cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["returned"]["status"] == "passed" and report["raised"]["status"] == "KeyboardInterrupt"
    for case in ("returned", "raised"):
        before, after = report[case]["before"], report[case]["after"]
        for key in ("subreaper", "signals", "env", "cwd"):
            assert after[key] == before[key], (case, key)
    assert report["returned"]["before"]["subreaper"] == 0 and report["raised"]["before"]["subreaper"] == 1
    assert "interrupt" in report["raised"]["before"]["signals"]["SIGALRM"]
    assert processes_of(project / "chaosckpt-results") == []
    interrupted = sorted((project / "chaosckpt-results").glob("*-kill9-mid-save*"))[-1]
    assert list(interrupted.rglob("stdout.log")), "the interruption came while a job ran"
    assert not (interrupted / "result.json").exists()
