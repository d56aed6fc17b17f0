"""chaosckpt's own state is checked, not trusted: locks, the history database, the reference cache (issue 16)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

from chaosckpt.conductor.results import history
from chaosckpt.conductor.runs import cache, locks


def test_a_held_lock_is_refused_with_its_holder_and_freed_when_its_holder_dies(tmp_path):
    path = tmp_path / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import fcntl, os, sys, time
fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{{os.getpid()}}\\n".encode())
print("held", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(locks.Busy) as busy:
        locks.acquire(path)
    assert busy.value.pid == holder.pid
    holder.kill()
    holder.wait()
    locks.release(locks.acquire(path))


def _suite_rows(project: Path):
    db = sqlite3.connect(project / ".chaosckpt" / "history.sqlite")
    try:
        return db.execute("SELECT folder FROM suites").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_history_is_moved_aside_with_a_warning_and_a_new_one_started(tmp_path, capsys, damage):
    project = tmp_path / "project"
    project.mkdir()
    history.record(project, "2026-01-01 00:00:00", Path("/suite/one"), "python train.py", "1", [])
    path = project / ".chaosckpt" / "history.sqlite"
    for n in range(200):  # enough rows for the file to span pages, so a cut one is damaged
        history.record(project, "2026-01-01 00:00:00", Path(f"/suite/{n}-{'x' * 200}"), "python train.py", "1", [])
    data = path.read_bytes()
    path.write_bytes(b"not a database " * 100 if damage == "garbage" else data[: len(data) // 2])
    capsys.readouterr()

    history.record(project, "2026-01-02 00:00:00", Path("/suite/two"), "python train.py", "1", [])

    err = capsys.readouterr().err
    assert "history.sqlite was damaged" in err and "started a new history" in err
    assert len(list(path.parent.glob("history.sqlite.damaged-*"))) == 1
    assert _suite_rows(project) == [("/suite/two",)]


def test_a_suite_is_recorded_in_the_history_once(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for _ in range(2):
        history.record(project, "2026-01-01 00:00:00", Path("/suite/one"), "python train.py", "1", [])
    assert _suite_rows(project) == [("/suite/one",)]


def test_a_damaged_cached_reference_is_discarded_with_a_note_and_run_again(tmp_path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    command = [sys.executable, "-c", "print('a line of the log ' * 50)"]
    parts = {"command": command}

    assert cache.reference_into(tmp_path / "first", "k" * 32, parts, command, project, 60, []) is False
    entry = project / ".chaosckpt" / "references" / ("k" * 32)
    assert cache.damage(entry) is None
    assert cache.reference_into(tmp_path / "second", "k" * 32, parts, command, project, 60, []) is True
    log = entry / "stdout.log"
    log.write_bytes(log.read_bytes()[:100])  # a truncated copy
    capsys.readouterr()

    assert cache.reference_into(tmp_path / "third", "k" * 32, parts, command, project, 60, []) is False

    err = capsys.readouterr().err
    assert f"the cached reference run {'k' * 12} is damaged (stdout.log holds 100 bytes" in err
    assert cache.damage(entry) is None  # run again (the job can write only in its sandbox, so no counter)
    assert (entry / "stdout.log").read_bytes() == (tmp_path / "third" / "stdout.log").read_bytes()
    assert len((entry / "stdout.log").read_bytes()) > 100


def test_an_entry_without_its_manifest_is_unfinished(tmp_path):
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / cache.RUN_FILE).write_text(json.dumps({}))
    assert "manifest.json is missing" in cache.damage(entry)


def test_a_crash_report_goes_into_the_results_folder_of_the_run(tmp_path, monkeypatch, capsys):
    from chaosckpt.conductor import cli
    from chaosckpt.conductor.errors import ExitCode

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('never runs')\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)

    def broken(*args, **kwargs):
        raise ValueError("a bug in the scorer")

    monkeypatch.setattr("chaosckpt.conductor.trial.run_trial", broken)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "train.py", "-s", "kill9-mid-save", "--out", str(tmp_path / "r")])
    assert exit_info.value.code == ExitCode.INTERNAL
    report = Path(capsys.readouterr().err.strip().splitlines()[-1].rsplit(": ", 1)[1])
    assert report.parent.parent == tmp_path / "r" and report.name.startswith("chaosckpt-crash-")
    assert "a bug in the scorer" in report.read_text()


def test_enospc_in_chaosckpts_own_writes_is_inconclusive_naming_the_disk(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from chaosckpt.conductor import cli
    from chaosckpt.conductor.errors import ExitCode

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('never runs')\n")
    monkeypatch.chdir(project)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "r" / "x" / "result.json"))

    monkeypatch.setattr("chaosckpt.conductor.trial.run_trial", full)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "train.py", "-s", "kill9-mid-save", "--out", str(tmp_path / "r")])
    assert exit_info.value.code == ExitCode.INCONCLUSIVE
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"chaosckpt: inconclusive: the disk holding {tmp_path / 'r' / 'x'} (mounted at ")
    assert "bytes free" in err and "chaosckpt could not write its results" in err


def test_a_stored_reference_depends_on_the_files_its_job_read_and_its_sources_not_on_a_log_beside_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('train')\n")
    (work / "data.bin").write_bytes(b"rows")
    (work / "other.bin").write_bytes(b"never read")
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    box = tmp_path / "box"
    box.mkdir()
    (run / "events" / "inputs.123.json").write_text(json.dumps({"cwd": str(box), "files": ["data.bin", "ckpt"]}))
    cache.write_inputs(run, box, work, [], ["python", "train.py"])
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) is None

    (work / "suite.log").write_text("redirected output\n")
    (work / "other.bin").write_bytes(b"changed, but never read")
    (work / "ckpt").mkdir()
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) == "ckpt changed"
    (work / "ckpt").rmdir()
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) is None
    (work / "data.bin").write_bytes(b"other rows")
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) == "data.bin changed"
    (work / "data.bin").write_bytes(b"rows")
    (work / "helpers.py").write_text("X = 1\n")
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) == "helpers.py is new"


def test_without_a_report_from_the_job_every_file_counts(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.sh").write_text("echo hi\n")
    (work / "data.bin").write_bytes(b"rows")
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    cache.write_inputs(run, tmp_path / "box", work, [], ["bash", "train.sh"])
    (work / "data.bin").write_bytes(b"other rows")
    assert cache.inputs_changed(run, work, [], ["bash", "train.sh"]) == "data.bin changed"


ENV_JOB = """\
import os, sys, tempfile
from chaosckpt.agent import inputs
inputs.start()
lr = os.environ.get("MYJOB_LR", "0.1")
debug = "MYJOB_DEBUG" in os.environ
seed = os.getenv("MYJOB_SEED")
tempfile.gettempdir()  # the standard library reads TMPDIR: a library's setting, not the job's
if sys.argv[1:] == ["walk"]:
    settings = {k: v for k, v in os.environ.items() if k.startswith("MYJOB_")}
"""


@pytest.mark.parametrize("walk", [False, True])
def test_the_agent_reports_the_environment_variables_the_jobs_own_code_reads(tmp_path, walk):
    (tmp_path / "job.py").write_text(ENV_JOB)
    run_dir = tmp_path / "events"
    run_dir.mkdir()
    env = {**os.environ, "CHAOSCKPT_INPUTS": "1", "CHAOSCKPT_RUN_DIR": str(run_dir), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "job.py", *(["walk"] if walk else [])], cwd=tmp_path, env=env, check=True)
    (report,) = run_dir.glob("inputs.*.json")
    said = json.loads(report.read_text())["env"]
    assert said == (None if walk else ["MYJOB_DEBUG", "MYJOB_LR", "MYJOB_SEED"])


def _stored(tmp_path, env, command=("python", "train.py")):
    work, run, box = tmp_path / "work", tmp_path / "run", tmp_path / "box"
    for folder in (work, run / "events", box):
        folder.mkdir(parents=True)
    (work / "train.py").write_text("print('train')\n")
    (run / "events" / "inputs.7.json").write_text(json.dumps({"cwd": str(box), "files": [], "env": env}))
    cache.write_inputs(run, box, work, [], list(command))
    return run, work


def test_a_stored_reference_depends_on_the_environment_variables_its_job_read_and_keeps_no_value(tmp_path, monkeypatch):
    monkeypatch.setenv("MYJOB_LR", "0.1")
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    run, work = _stored(tmp_path, ["MYJOB_LR", "MYJOB_UNSET"])
    assert "0.1" not in (run / cache.INPUTS).read_text()
    monkeypatch.setenv("SECRET_TOKEN", "changed, never read by the job")
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) is None
    monkeypatch.setenv("MYJOB_LR", "0.2")
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) == "the environment variable MYJOB_LR changed"
    monkeypatch.setenv("MYJOB_LR", "0.1")
    monkeypatch.setenv("MYJOB_UNSET", "now set")
    assert cache.inputs_changed(run, work, [], ["python", "train.py"]) == "the environment variable MYJOB_UNSET changed"


@pytest.mark.parametrize("env, command", [(None, ("python", "train.py")), (["MYJOB_LR"], ("bash", "train.sh"))],
                         ids=["the job walked the environment", "a shell script started it"])
def test_a_stored_reference_depends_on_the_whole_environment_when_the_agent_cannot_say_what_was_read(
        tmp_path, monkeypatch, env, command):
    run, work = _stored(tmp_path, env, command)
    monkeypatch.setenv("SHLVL", "9")
    assert cache.inputs_changed(run, work, [], list(command)) is None, "a shell's own variables are left out"
    monkeypatch.setenv("OTHER_SETTING", "x")
    assert cache.inputs_changed(run, work, [], list(command)) == "the environment variable OTHER_SETTING is new"
    monkeypatch.delenv("OTHER_SETTING")
    monkeypatch.setenv("HOME", "/elsewhere")
    assert cache.inputs_changed(run, work, [], list(command)) == "the environment variable HOME changed"
