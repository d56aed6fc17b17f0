"""kill9-mid-save end to end: real training jobs, real SIGKILL, real files, real resumes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, processes_of, run_chaosckpt, tree_digest

from chaosckpt.conductor.runs import launcher
from chaosckpt.protocol import read_event_file

pytestmark = pytest.mark.e2e


def trial_of(project: Path, *args: str, out: Path):
    return run_chaosckpt(["run", "--scenario", "kill9-mid-save", "--json", "--out", str(out), *args], cwd=project)


@pytest.mark.parametrize("horizon, compared", [("end", 48), ("5", 5)])
def test_robust_example_passes_and_leaves_the_user_directory_alone(tmp_path, horizon, compared):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "robust_train.py", project / "train.py")
    (project / "ckpt").mkdir()
    (project / "ckpt" / "precious.pt").write_bytes(b"the user's real checkpoint")
    before = tree_digest(project)
    results = tmp_path / "results"

    res = trial_of(project, "train.py", "--horizon", horizon, "--", "--epochs", "4", out=results)

    assert res.returncode == 0, res.stderr
    trial = res.trial
    assert trial["status"] == "passed" and trial["passed"] is True
    assert trial["outcome"] == "last-good"
    assert trial["recovered_step"] == trial["last_good_step"] == 16
    assert trial["reproduced"] is True and trial["compared_steps"] == compared
    assert [run["stopped"] for run in trial["runs"]] == [horizon != "end", False, horizon != "end"]
    assert trial["fault"]["save"] == 2 and trial["fault"]["step"] == 32
    assert trial["findings"] == []  # a job that keeps no copy of its checkpoint: no torn-copy either
    assert all(state["loads"] is not False for path, state in trial["fault"]["file_states"].items()
               if path.endswith("last.pt"))
    own = {k: v for k, v in tree_digest(project).items() if k != ".chaosckpt" and not k.startswith(".chaosckpt/")}
    assert own == before  # chaosckpt's own folder aside, where the finished run joined the history
    history = json.loads(run_chaosckpt(["history", "--json"], cwd=project).stdout)["scenarios"]
    assert [(h["scenario"], h["passed"], h["total"]) for h in history] == [("kill9-mid-save", 1, 1)]
    assert processes_of(results) == []
    stored = json.loads((Path(trial["results_dir"]) / "result.json").read_text())
    assert stored == res.doc
    for run in trial["runs"]:
        assert Path(run["stdout"]).is_file() and Path(run["stderr"]).is_file()


@pytest.mark.parametrize("horizon", ["50", "3"])
def test_naive_example_fails_with_the_torn_checkpoint(tmp_path, horizon):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "examples" / "naive_train.py", project / "train.py")
    results = tmp_path / "results"

    res = run_chaosckpt(["run", "train.py", "-s", "kill9-mid-save", "--horizon", horizon, "--out", str(results), "--",
                         "--epochs", "4"], cwd=project)

    assert res.returncode == 1, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("FAILED kill9-mid-save: resume crashed loading ckpt/last.pt (unreadable: ")
    assert lines[0].endswith("the last good checkpoint was step 16")
    assert any(line.startswith("  - in-place-save: ") for line in lines[1:])
    assert lines[-1].startswith("  results and logs: ")
    (stored,) = results.glob("*/result.json")
    trial = json.loads(stored.read_text())["trials"][0]
    assert trial["headline"] == lines[0]
    assert trial["status"] == "failed" and trial["outcome"] == "crashed"
    assert trial["error_path"] == "ckpt/last.pt"
    assert trial["last_good_step"] == 16 and trial["lost_steps"] == 32
    # the killed save left exactly the bytes written before the fault
    assert trial["fault"]["files"]["ckpt/last.pt"] == trial["fault"]["bytes"]
    (torn,) = [f for f in trial["findings"] if f["kind"] == "torn-checkpoint"]
    assert torn["path"] == "ckpt/last.pt" and 0 < torn["bytes"] < torn["full_bytes"]
    (finding,) = [f for f in trial["findings"] if f["kind"] == "in-place-save"]
    assert finding["path"] == "ckpt/last.pt" and finding["overwritten_step"] == 16
    (missing,) = [f for f in trial["findings"] if f["kind"] == "rng-states-missing"]
    assert missing["message"].startswith("this checkpoint carries no RNG state; the loop draws from 1 stream (torch)")
    assert processes_of(results) == []


def test_a_random_stream_left_unrestored_is_named(project, tmp_path):
    res = trial_of(project, "train.py", "--", "--restore", "torch,loader", out=tmp_path / "r")
    assert res.returncode == 1
    trial = res.trial
    assert trial["outcome"] == "last-good" and trial["reproduced"] is False
    assert trial["first_divergent_step"] == trial["recovered_step"] + 1
    streams = [f["stream"] for f in trial["findings"] if f["kind"] == "rng-not-restored"]
    assert streams == ["python"]
    assert "diverged from the uninterrupted run at step" in trial["headline"]


def test_a_job_killed_by_a_signal_after_its_script_ended_is_judged_with_the_crash_named(project, tmp_path):
    """torch's gloo teardown can abort a rank after its work is done: no reason to throw the trial away."""
    res = trial_of(project, "train.py", "--", "--abort-at-exit", out=tmp_path / "r")
    assert res.returncode == 0, res.trial["headline"]
    trial = res.trial
    assert trial["outcome"] == "last-good" and trial["reproduced"] is True
    runs = {r["name"]: r["returncode"] for r in trial["runs"]}
    assert runs["reference"] == runs["resume"] == -6
    crashes = [f for f in trial["findings"] if f["kind"] == "crash-at-exit"]
    assert [f["message"].split(" was killed")[0] for f in crashes] == ["the uninterrupted run", "the resumed run"]
    assert all("in the interpreter's shutdown by SIGABRT (see " in f["message"] for f in crashes)


def test_resuming_an_older_checkpoint_counts_the_lost_work(project, tmp_path):
    res = trial_of(project, "train.py", "-p", "save=3", "--", "--resume-from", "oldest", out=tmp_path / "r")
    assert res.returncode == 1
    trial = res.trial
    assert trial["outcome"] == "older"
    assert (trial["recovered_step"], trial["last_good_step"], trial["lost_steps"]) == (8, 16, 16)


@pytest.mark.parametrize("placement, save, step, stopped", [("step=9", 2, 16, True), ("save=-2", 3, 24, False)])
def test_a_fault_placed_by_step_or_from_the_end_lands_in_that_save(project, tmp_path, placement, save, step, stopped):
    res = trial_of(project, "train.py", "-p", placement, "--horizon", "3", out=tmp_path / "r")
    assert res.returncode == 0, res.trial["headline"]
    trial = res.trial
    assert (trial["fault"]["save"], trial["fault"]["step"], trial["last_good_step"]) == (save, step, step - 8)
    assert trial["params"]["trigger"][placement.split("=")[0]] == int(placement.split("=")[1])
    assert trial["compared_steps"] == 3 and trial["runs"][0]["stopped"] is stopped


def test_a_job_that_never_resumes_restarts_from_scratch(project, tmp_path):
    res = trial_of(project, "train.py", "--", "--resume-from", "none", out=tmp_path / "r")
    assert res.returncode == 1
    assert res.trial["outcome"] == "scratch" and res.trial["recovered_step"] == 0


def test_resume_args_are_appended_for_the_resume_run(project, tmp_path):
    """Also: a job that evaluates on random rows before it saves captures its RNG state after those draws: it
    passes (the job that evaluates after its save is test_e2e_diagnosis's)."""
    res = trial_of(project, "train.py", "--resume-args=--resumed", "--", "--eval", "before-save", "--epochs", "3",
                   "--resume-flag", out=tmp_path / "r")
    assert res.returncode == 0, res.trial["headline"]
    assert res.trial["findings"] == []
    resume = [r for r in res.trial["runs"] if r["name"] == "resume"][0]
    assert resume["command"][-2:] == ["--resume-flag", "--resumed"]


def test_explicit_write_index_of_a_save_through_a_file_object(project, tmp_path):
    res = trial_of(project, "train.py", "-p", "write=3", "--", "--save", "fileobj-inplace", out=tmp_path / "r")
    assert res.returncode == 1
    assert res.trial["fault"]["write"] == 3 and res.trial["outcome"] == "crashed"
    assert res.trial["error_path"] == "ckpt/last.pt"


def _events(run_dir: Path):
    return {p.name: read_event_file(p) for p in sorted(run_dir.glob("events.*.jsonl"))}


def test_forked_dataloader_workers_record_nothing(project, tmp_path):
    res = trial_of(project, "train.py", "--", "--workers", "2", out=tmp_path / "r")
    assert res.returncode == 0, res.trial["headline"]
    events = _events(Path(res.trial["runs"][0]["events"]))
    assert len(events) == 1  # the workers' torch.save calls left no file of their own
    (only,) = events.values()
    assert sum(e["t"] == "save-begin" for e in only) == 4
    assert processes_of(tmp_path / "r") == []


def test_spawned_dataloader_workers_stay_inert(project, tmp_path):
    spec = launcher.RunSpec(
        "spawn", [sys.executable, "train.py", "--epochs", "1", "--workers", "2", "--mp-context", "spawn"],
        project, tmp_path / "spawn", timeout_s=240,
    )
    result = launcher.launch(spec)
    assert result.returncode == 0, result.stderr.read_text()
    events = _events(result.events_dir)
    assert len(events) == 1
    (only,) = events.values()
    assert sum(e["t"] == "save-begin" for e in only) == 1


def test_shell_script_running_another_interpreter_is_instrumented(project, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    torch_site = Path(__import__("torch").__file__).parent.parent
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "torch_only.pth").write_text(f"{torch_site}\n")
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import chaosckpt"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0, "the other interpreter must not see chaosckpt by itself"
    (project / "train.sh").write_text(f'#!/bin/bash\nexec "{python}" train.py "$@"\n')

    res = trial_of(project, "--resume-cmd", "bash train.sh", "--", "bash", "train.sh", out=tmp_path / "r")

    assert res.returncode == 0, res.trial["headline"]
    hello = [e for evs in _events(Path(res.trial["runs"][0]["events"])).values() for e in evs if e["t"] == "hello"]
    assert hello and hello[0]["argv"][0] == str(python)


def test_user_sitecustomize_is_chained(project, tmp_path):
    own = project / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nopen('ran-user-sitecustomize', 'w').close()\n")
    spec = launcher.RunSpec("chain", [sys.executable, "train.py", "--epochs", "1"], project, tmp_path / "chain", 120,
                            env={"PYTHONPATH": str(own)})
    result = launcher.launch(spec)
    assert result.returncode == 0, result.stderr.read_text()
    assert (project / "ran-user-sitecustomize").exists()
    assert any(e["t"] == "step" for evs in _events(result.events_dir).values() for e in evs)
