"""Suite configuration: where it is found, what it accepts, and that the command line overrides it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import read_junit, run_chaosckpt

from chaosckpt.conductor import config
from chaosckpt.conductor.errors import UsageError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_pyproject_table_is_read_with_paths_from_its_folder(tmp_path):
    write(tmp_path / "pyproject.toml", """
[project]
name = "job"

[tool.chaosckpt]
command = ["train.py", "--epochs", "3"]
resume_args = "--resume yes"
nproc = 1
tolerance = 1e-6
timeout = 120
results = "out"
jobs = 2
scenarios = ["kill9-mid-save", { scenario = "kill9-mid-save", id = "late", params = { save = 3, fraction = 0.9 } },
             { scenario = "power-loss", sweep = true }]
""")
    sub = tmp_path / "src" / "deep"
    sub.mkdir(parents=True)

    conf = config.load(None, sub)

    assert conf.source == str(tmp_path / "pyproject.toml")
    assert conf.command == ("train.py", "--epochs", "3")
    assert conf.resume_args == ("--resume", "yes")
    assert (conf.tolerance, conf.timeout, conf.jobs, conf.nproc) == (1e-6, 120, 2, 1)
    assert conf.results == tmp_path / "out" and conf.workdir == tmp_path
    assert conf.scenarios == (config.ScenarioEntry("kill9-mid-save"),
                              config.ScenarioEntry("kill9-mid-save", {"save": 3, "fraction": 0.9}, "late"),
                              config.ScenarioEntry("power-loss", sweep=True))


def test_chaosckpt_toml_wins_over_pyproject_in_the_same_folder(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.chaosckpt]\ntimeout = 5\n")
    write(tmp_path / "chaosckpt.toml", "timeout = 7\n")
    assert config.load(None, tmp_path).timeout == 7


def test_a_pyproject_without_the_table_is_passed_over(tmp_path):
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    conf = config.load(None, tmp_path)
    assert conf.source is None and conf.timeout == 3600.0 and conf.workdir == tmp_path.resolve()


def test_command_line_values_override_the_file(tmp_path):
    conf = config.load(write(tmp_path / "chaosckpt.toml", "timeout = 7\ntolerance = 0.1\njobs = 3\n"), tmp_path)
    merged = conf.merged(timeout=9.0, tolerance=None, jobs=None)
    assert (merged.timeout, merged.tolerance, merged.jobs) == (9.0, 0.1, 3)


@pytest.mark.parametrize(
    "text, message",
    [
        ("timout = 5\n", "unknown key 'timout'; did you mean 'timeout'?"),
        ("timeout = '10m'\n", "timeout must be a number, got \"10m\""),
        ("timeout = 0\n", "timeout must be a number of seconds > 0, got 0"),
        ("jobs = 1.5\n", "jobs must be a whole number >= 1, got 1.5"),
        ("nproc = true\n", "nproc must be a whole number >= 1, got true"),
        ("command = 3\n", "command must be a string or a list of strings, got 3"),
        ("scenarios = [{ scenario = 'kill9-mid-save', parms = {} }]\n", "unknown key 'scenarios[0].parms'; did you mean 'params'?"),
        ("scenarios = [{ scenario = 'kill9-mid-save', params = 3 }]\n", "scenarios[0].params must be a table"),
        ("scenarios = [{ scenario = 'power-loss', sweep = 'yes' }]\n", 'scenarios[0].sweep must be true or false, got "yes"'),
        ("resume_args = '-r'\nresume_command = 'x'\n", "give one, not both"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, message):
    path = write(tmp_path / "chaosckpt.toml", text)
    with pytest.raises(UsageError, match=None) as info:
        config.load(path, tmp_path)
    assert message in str(info.value)
    assert str(info.value).startswith("chaosckpt.toml: ")


def test_the_cli_prints_a_config_error_in_one_line_with_exit_2(project):
    write(project / "pyproject.toml", "[tool.chaosckpt]\ncommand = 'train.py'\nseed = 'x'\n")
    res = run_chaosckpt(["suite"], cwd=project)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["chaosckpt: error: pyproject.toml: tool.chaosckpt.seed must be a whole number, got \"x\""]


def test_ranks_are_launched_through_torch_distributed_run(project):
    import sys

    from chaosckpt.conductor.runs import invocation

    command = invocation.with_ranks([sys.executable, "train.py", "--lr", "1"], 2)
    assert command == [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                       "train.py", "--lr", "1"]
    res = run_chaosckpt(["suite", "train.py", "--nproc", "0"], cwd=project)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["chaosckpt: error: --nproc must be a whole number >= 1, got 0"]
    assert not (project / "chaosckpt-results").exists()


def test_an_unknown_scenario_is_refused_before_anything_runs(project):
    write(project / "chaosckpt.toml", "command = 'train.py'\nscenarios = ['kill9-mid-save', 'nope']\n")
    res = run_chaosckpt(["suite"], cwd=project)
    assert res.returncode == 2 and "unknown scenario 'nope'" in res.stderr
    assert not (project / "chaosckpt-results").exists()


def test_a_script_in_the_folder_runs_by_its_shebang_or_with_bash(tmp_path):
    from chaosckpt.conductor.runs import invocation

    write(tmp_path / "train.sh", "python train.py \"$@\"\n")
    write(tmp_path / "run-env", "#!/usr/bin/env -S python3 -u\nprint('hi')\n")
    write(tmp_path / "launch.bash", "#!/bin/bash -e\ntorchrun train.py\n")
    write(tmp_path / "notes.txt", "train for a while\n")
    binary = write(tmp_path / "a.out", "\x7fELF")
    binary.chmod(0o755)
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "go.sh", "#!/bin/sh\n")

    assert invocation.job_command(["train.sh", "--epochs", "2"], tmp_path, tmp_path) == ["bash", "train.sh", "--epochs", "2"]
    assert invocation.job_command(["run-env"], tmp_path, tmp_path) == ["/usr/bin/env", "-S python3 -u", "run-env"]
    assert invocation.job_command(["launch.bash", "x"], tmp_path, tmp_path) == ["/bin/bash", "-e", "launch.bash", "x"]
    assert invocation.job_command(["sub/go.sh"], tmp_path, tmp_path) == ["/bin/sh", "sub/go.sh"]
    assert invocation.job_command(["a.out"], tmp_path, tmp_path) == ["./a.out"]
    assert invocation.job_command(["bash", "train.sh"], tmp_path, tmp_path) == ["bash", "train.sh"]
    with pytest.raises(UsageError, match="script notes.txt has no #! line saying what runs it and is not executable; "
                                         "add one, or give its interpreter after --, e.g. -- bash notes.txt"):
        invocation.job_command(["notes.txt"], tmp_path, tmp_path)
    with pytest.raises(UsageError, match="script go.sh is outside the working directory"):
        invocation.job_command(["go.sh"], tmp_path / "elsewhere", tmp_path / "sub")


def test_run_refuses_configured_ranks_for_a_shell_script_before_anything_runs(project):
    write(project / "train.sh", "python train.py\n")
    write(project / "chaosckpt.toml", "command = 'train.sh'\nnproc = 2\n")
    res = run_chaosckpt(["run", "-s", "kill9-mid-save"], cwd=project)
    assert res.returncode == 2 and "--nproc runs a SCRIPT.py" in res.stderr  # nproc came from the file
    assert not (project / "chaosckpt-results").exists()


@pytest.mark.e2e
def test_run_in_a_configured_project_needs_only_the_scenario(project):
    import sys

    write(project / "train.sh", f"exec {sys.executable} train.py --epochs 2 --resume-flag \"$@\"\n")
    write(project / "pyproject.toml", """
[tool.chaosckpt]
command = "train.sh"
resume_args = "--resumed"
tolerance = 1e-6
timeout = 300
results = "out"
""")
    (project / "src").mkdir()

    res = run_chaosckpt(["run", "-s", "kill9-mid-save", "--json"], cwd=project / "src")

    assert res.returncode == 0, res.stderr
    trial = res.trial
    assert trial["status"] == "passed" and trial["outcome"] == "last-good"  # resumed only because of resume_args
    assert trial["tolerance"] == 1e-6
    commands = {r["name"]: r["command"] for r in trial["runs"]}
    assert commands["faulted"] == ["bash", "train.sh"] and commands["resume"] == ["bash", "train.sh", "--resumed"]
    assert Path(trial["results_dir"]).parent == project / "out"
    # the JUnit of a real run folder, as chaosckpt report writes it, passes junit-10 and reads back
    report = run_chaosckpt(["report", trial["results_dir"], "--junit", "junit.xml"], cwd=project)
    assert report.returncode == 0, report.stderr
    [suite] = list(read_junit(project / "junit.xml"))
    [case] = list(suite)
    assert case.name == "kill9-mid-save" and case.time == pytest.approx(sum(r["duration_s"] for r in trial["runs"]), abs=0.002)
    assert suite.hostname == res.doc["hostname"] and suite.timestamp
